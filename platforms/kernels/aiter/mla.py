"""Multi-head latent attention whose decode rows run AITER's `mla_decode_fwd`, absorbed form.

The absorbed form of torch_native's `AbsorbedMLA` (each head's query moved onto the latent and
joined with its rotary part, `[T, H, R + r]`; the value up-projection applied after attention),
whose SDPA path serves extend rows: AITER's MLA kernels decode only. Decode rows go to
`aiter.mla.mla_decode_fwd` (aiter/mla.py) as upstream SGLang's aiter backend hands them over
(python/sglang/srt/layers/attention/aiter_backend.py `forward_decode`, read at 25b38cc2):
the pool's one `[num_slots, R + r]` buffer viewed as `[num_slots, 1, 1, R + r]` (pages of one
token, one KV head: a view, no copy), a token-level CSR view of the decode rows' slots
(`kv_indptr`, `kv_indices`), every last page one token long, one query per row
(`qo_indptr = arange`, `max_seqlen_q = 1`), and an output `o` `[Bd, H, R]` the kernel writes:
the attended latent, the value being each row's first `R` columns. Its return value is not the
output (the float32 per-split partials unless it ran one split), so `o` is read.

Pages of one token are how upstream passes the cache whatever the pool's page size: the kernel
reads one page stride, so any pool serves. The call leaves `num_kv_splits` and the persistent
work schedule (`work_meta_data`) unset: AITER picks the split count from the batch and the
device's compute units, and takes its non-persistent kernels, which upstream also uses for a
bf16 cache (its persistent kernels are for fp8 caches).

Requirements, declared in `family.py`: bf16, row width 576 (rank 512 + rotary 64), query heads
per rank with a kernel, gfx942/gfx950, `aiter.mla` importable; the constructor refuses other
widths. Graph capture is not offered yet (the base class says why).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from aiter.mla import mla_decode_fwd

from sglang.ops.attention import AttentionInputs
from sglang.platforms.kernels.aiter.family import MLA_KV_LORA_RANK, MLA_ROPE_DIM
from sglang.platforms.kernels.torch_native.attention import SdpaAttentionMetadata
from sglang.platforms.kernels.torch_native.mla import AbsorbedMLA


@dataclass
class AiterMLAMetadata(SdpaAttentionMetadata):
    qo_indptr: torch.Tensor | None = field(default=None, repr=False)
    """Device int32 `[Bd + 1]`: one query per decode row."""
    kv_indptr: torch.Tensor | None = field(default=None, repr=False)
    """Device int32 `[Bd + 1]`: each decode row's tokens in `kv_indices` (pages of one token)."""
    kv_indices: torch.Tensor | None = field(default=None, repr=False)
    """Device int32: the decode rows' cache slots, row after row."""
    kv_last_page_lens: torch.Tensor | None = field(default=None, repr=False)
    """Device int32 `[Bd]` of ones: a one-token page is always full."""


class AiterMLA(AbsorbedMLA):
    fixed_widths = (MLA_KV_LORA_RANK, MLA_ROPE_DIM)

    def plan(self, inputs: AttentionInputs) -> AiterMLAMetadata:
        decode = [i for i, e in enumerate(inputs.extend_lens) if e == 1]
        extend = tuple(i for i, e in enumerate(inputs.extend_lens) if e > 1)
        meta = AiterMLAMetadata(inputs=inputs, new_slots=inputs.new_slots(), extend_rows=extend)
        if decode:
            as_device = {"dtype": torch.int32, "device": self.device}
            lens = torch.tensor([inputs.seq_lens[i] for i in decode], dtype=torch.int64)
            starts = inputs.kv_starts
            slots = [inputs.kv_slots[starts[i] : starts[i + 1]] for i in decode]
            meta.decode_rows = torch.tensor(decode)
            meta.decode_q_index = torch.tensor([inputs.q_starts[i] for i in decode])
            meta.qo_indptr = torch.arange(len(decode) + 1, **as_device)
            meta.kv_indptr = torch.cat([lens.new_zeros(1), lens.cumsum(0)]).to(**as_device)
            meta.kv_indices = torch.cat(slots).to(**as_device)
            meta.kv_last_page_lens = torch.ones(len(decode), **as_device)
        return meta

    def _decode(self, query: torch.Tensor, kv_buffer: torch.Tensor, metadata: AiterMLAMetadata, layer):
        rows, heads = query.shape[:2]
        out = query.new_empty(rows, heads, self.kv_lora_rank, dtype=self.dtype)
        mla_decode_fwd(
            query.to(self.dtype).contiguous(),
            kv_buffer.view(-1, 1, 1, kv_buffer.shape[-1]),
            out,
            metadata.qo_indptr,
            metadata.kv_indptr,
            metadata.kv_indices,
            metadata.kv_last_page_lens,
            1,
            page_size=1,
            nhead_kv=1,
            sm_scale=layer.scale,
        )
        return out
