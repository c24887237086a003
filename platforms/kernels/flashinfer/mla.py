"""Multi-head latent attention through FlashInfer's `BatchMLAPagedAttentionWrapper`, absorbed form.

FlashInfer's MLA kernel (flashinfer/mla/_core.py, `BatchMLAPagedAttentionWrapper`) is the
weight-absorbed form of `ops.mla`: each head's query is moved onto the latent
(`q_nope[h] @ w_kc[h]`, width `R`) and, with its rotary part, attends over the cached latent
rows; the attended latent `[T, H, R]` comes back and `w_vc` maps it to each head's values.

KV layout: the pool keeps MLA's one buffer `[num_slots, R + r]` (`MLABackend.kv_buffer_shape`),
so the pool is sized, and the radix cache and KV copies move rows, exactly as for every MLA
backend. Viewed `[num_slots // P, P, R + r]`, its first `R` columns are FlashInfer's paged
`ckv_cache` `[num_pages, page_size, head_dim_ckv]` and its last `r` its `kpe_cache`: strided
views, no copy (csrc/batch_mla_run.cu reads the page and token strides of both caches, so the
caches need only a unit feature stride).

`plan` runs once per layer setting (the scale) per step, on first use, from the token-level
metadata: `qo_indptr`, the CSR page view (`kv_indptr`, `kv_indices`) and the per-row KV lengths
`kv_len_arr`, all int32 (FlashInfer's prebuilt MLA modules index in int32, flashinfer/aot.py).
Extend steps plan causal (FlashInfer aligns the mask bottom-right, which covers a cached prefix);
decode steps plan non-causal, as upstream SGLang's flashinfer MLA backend does (one query sees
its whole row either way). Rows with no new token are left out of the plan.

Requirements, declared in `family.py`: fp16/bf16 (the wrapper's `plan` also takes fp8 KV, on SM90
only, not used here), `head_dim_ckv` 512 and `head_dim_kpe` 64 (DeepSeek V2/V3; the only MLA
shape FlashInfer's wheel prebuilds, flashinfer/aot.py, others JIT-compile), any page size.
Graph capture is not offered yet (the base class says why).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import flashinfer
import torch

from sglang.ops.attention import AttentionInputs, AttentionMetadata
from sglang.ops.mla import MLABackend, store_latent
from sglang.platforms.kernels.flashinfer.attention import WORKSPACE_BYTES
from sglang.platforms.kernels.flashinfer.family import MLA_KPE_DIM, MLA_LATENT_DIM
from sglang.platforms.kernels.page_views import csr_pages


@dataclass
class FlashInferMLAMetadata(AttentionMetadata):
    causal: bool = True
    """False when every planned row decodes one token."""
    qo_indptr: torch.Tensor | None = field(default=None, repr=False)
    """Host int32 `[rows + 1]`: each planned row's new tokens."""
    kv_indptr: torch.Tensor | None = field(default=None, repr=False)
    """Host int32 `[rows + 1]`: each planned row's pages in `kv_indices`."""
    kv_indices: torch.Tensor | None = field(default=None, repr=False)
    """Device int32: the planned rows' pages, row after row."""
    kv_len_arr: torch.Tensor | None = field(default=None, repr=False)
    """Host int32 `[rows]`: each planned row's tokens in the cache."""
    wrappers: dict[float, object] = field(default_factory=dict, repr=False)
    """One planned wrapper per softmax scale seen this step."""


class FlashInferMLA(MLABackend):
    decode_rows_see_each_other = True  # `forward` stores every new latent row before the kernel reads
    fixed_widths = (MLA_LATENT_DIM, MLA_KPE_DIM)

    def __init__(
        self, num_heads: int, kv_lora_rank: int, qk_rope_head_dim: int, dtype: torch.dtype, device: torch.device
    ) -> None:
        super().__init__(num_heads, kv_lora_rank, qk_rope_head_dim, dtype, device)
        # Zeroed like the K/V adapter's: split-KV scratch may be read before written on first use.
        self.workspace = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=device)

    def kv_buffer_shape(self, num_slots: int) -> tuple[int, ...]:
        """`[num_slots, R + r]`: `[:, :R]` is the paged `ckv_cache`, `[:, R:]` the `kpe_cache`."""
        return (num_slots, self.kv_lora_rank + self.qk_rope_head_dim)

    def plan(self, inputs: AttentionInputs) -> FlashInferMLAMetadata:
        rows = [i for i, e in enumerate(inputs.extend_lens) if e]
        pages = csr_pages(inputs, self.page_size, rows)
        qo = torch.tensor([0, *(inputs.extend_lens[i] for i in rows)], dtype=torch.int64).cumsum(0)
        return FlashInferMLAMetadata(
            inputs=inputs,
            new_slots=inputs.new_slots().to(self.device),
            causal=not inputs.is_decode,
            qo_indptr=qo.to(torch.int32),
            kv_indptr=pages.indptr,
            kv_indices=pages.indices.to(self.device),
            kv_len_arr=torch.tensor([inputs.seq_lens[i] for i in rows], dtype=torch.int32),
        )

    def _planned(self, meta: FlashInferMLAMetadata, scale: float) -> object:
        wrapper = meta.wrappers.get(scale)
        if wrapper is None:
            wrapper = flashinfer.BatchMLAPagedAttentionWrapper(self.workspace)
            wrapper.plan(
                meta.qo_indptr,
                meta.kv_indptr,
                meta.kv_indices,
                meta.kv_len_arr,
                self.num_heads,
                self.kv_lora_rank,
                self.qk_rope_head_dim,
                self.page_size,
                meta.causal,
                scale,
                self.dtype,
                self.dtype,
            )
            meta.wrappers[scale] = wrapper
        return wrapper

    def forward(self, q_nope, q_pe, latent, k_pe, w_kc, w_vc, kv_buffer, metadata, layer):
        kv_buffer = store_latent(kv_buffer, metadata.new_slots, latent, k_pe)
        if not q_nope.shape[0]:
            return q_nope.new_empty(0, self.num_heads, w_vc.shape[1]), kv_buffer
        rank = self.kv_lora_rank
        pages = kv_buffer.view(kv_buffer.shape[0] // self.page_size, self.page_size, rank + self.qk_rope_head_dim)
        query = torch.einsum("thd,hdr->thr", q_nope, w_kc.to(q_nope.dtype)).to(self.dtype)
        attended = self._planned(metadata, layer.scale).run(
            query, q_pe.to(self.dtype), pages[..., :rank], pages[..., rank:]
        )
        return torch.einsum("thr,hvr->thv", attended, w_vc.to(attended.dtype)), kv_buffer
