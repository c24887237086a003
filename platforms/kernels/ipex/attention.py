"""Paged attention through IPEX's Intel GPU kernels: `ipex.llm.modules.PagedAttention` for the
cache and decode, `ipex.llm.functional.varlen_attention` for everything else.

KV layout. IPEX's GPU decode kernel reads both cache halves as `[blocks, Hk, D, P]`: per block,
each head's dims, each dim over the block's `P` tokens. (That is the kernel's own layout and what
IPEX's GPU tests build; the Python docstring's `[num_blocks, num_heads, block_size, head_size]`
describes its CPU kernel.) So this backend declares `[2, num_slots // P, Hk, D, P]` through
`kv_buffer_shape`, and the pool is sized by `kv_bytes_per_token`. The default KV store and KV
copies do not apply to this layout (the runtime checks the declared shape before copying).

Writes. `PagedAttention.reshape_and_cache` stores values as `[blocks, Hk, D, P]` and keys as
`[blocks, Hk, D / x, P, x]`, reading `x` from the key cache's last dimension. The key half goes
viewed as `[blocks, Hk, D, P, 1]`: with `x = 1` both halves land in the decode kernel's layout.
The slot mapping is the step's new-token slots (int64, on the device).

Decode (every row has one new token, the layer has neither sliding window nor soft-cap):
`PagedAttention.single_query_kv_attention`, IPEX 2.8's name for it (`single_query_cached_kv_
attention` is the deprecated spelling that takes a head mapping), with the block table
`[rows, max_blocks]` and the context lengths `[rows]` (int32, on the device) derived from the
slots, and the longest context on the host. The kernel is compiled for blocks of 16 or 32 tokens
and head dims up to 256, in fp16/bf16. It takes no window, and its single-pass form (contexts up
to 512) ignores the soft-cap, so such layers take the extend path even in a decode step.

Extend (every other step or layer). IPEX documents `PagedAttention.flash_attn_varlen_func`, its
chunked-prefill kernel, for extends over a cached prefix, but that kernel reads NHD blocks
`[blocks, P, Hk, D]` (and only blocks of 32 tokens in fp16, or of 64 and more), which one cache
cannot share with the decode kernel's layout. So each row that has new tokens gathers its keys
and values (cached prefix and new tokens) by slot into packed `[tokens, Hk, D]` tensors, and
`ipex.llm.functional.varlen_attention`, which IPEX documents for packed variable-length
sequences, runs them causally; its causal mask is aligned bottom-right, so a row's queries (its
last tokens) see the whole prefix. The window goes as `(window - 1, 0)`, the soft-cap as is. On
GPUs without 2D block loads (IPEX's `xpu.has_2d_block_array()` is false, e.g. Arc A-series)
IPEX's varlen path ignores both, so there windowed and soft-capped layers run our reference over
the same packed tensors instead.

Every IPEX call passes IPEX 2.8's parameter names as keywords, so a renamed or reordered
parameter in another release fails at the call instead of binding a wrong argument.

Why IPEX and not `vllm-xpu-kernels`: IPEX's `ipex.llm` API is documented for use on its own (this
family already takes RMSNorm and SiLU-and-mul from it), while `vllm-xpu-kernels` registers vLLM's
internal custom-op schemas for vLLM to call, with no documented standalone Python API, built
against one torch+xpu release at a time. IPEX's repository was archived in 2026, so a later
family may move to whatever Intel maintains.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import accumulate

import intel_extension_for_pytorch as ipex
import torch

from sglang.ops.attention import (
    AttentionBackend,
    AttentionInputs,
    AttentionLayer,
    AttentionMetadata,
    ReferenceAttention,
)
from sglang.platforms.kernels.page_views import block_table

NO_WINDOW = -1
"""IPEX's window size meaning "unbounded"."""
NO_SOFTCAP = -1.0
"""IPEX's soft-cap meaning "none"."""


@dataclass(frozen=True)
class PackedRows:
    """The rows of a step that have new tokens, packed for varlen attention.

    Row `r`'s queries are `q[cu_seqlens_q[r]:cu_seqlens_q[r + 1]]` and its keys (prefix, then new
    tokens) sit at `(blocks[j], offsets[j])` for `j` in `cu_seqlens_k[r]:cu_seqlens_k[r + 1]`. The
    `cu_seqlens_*` are int32 on the device; `q_lens`/`k_lens` hold the same lengths on the host."""

    q_lens: tuple[int, ...]
    k_lens: tuple[int, ...]
    cu_seqlens_q: torch.Tensor
    cu_seqlens_k: torch.Tensor
    blocks: torch.Tensor
    """int64 `[keys]`, on the device: the block of each packed key."""
    offsets: torch.Tensor
    """int64 `[keys]`, on the device: its position in the block."""


@dataclass
class IpexMetadata(AttentionMetadata):
    block_table: torch.Tensor | None = field(default=None, repr=False)
    """Decode steps only: `[rows, max_blocks]` int32 on the device, padded with block 0."""
    context_lens: torch.Tensor | None = field(default=None, repr=False)
    """Decode steps only: `[rows]` int32 on the device."""
    max_context_len: int = 0
    packed: PackedRows | None = field(default=None, repr=False)
    """Built by the first layer of the step that takes the extend path, then reused."""


class IpexPagedAttention(AttentionBackend):
    """Invariants: `page_size` is 16 or 32 (the candidate's requirements) and the pool holds whole
    pages; `plan` builds the decode view only for all-decode steps, and each step's packed rows at
    most once. No graph-capture hooks: the xpu runtime captures no graphs."""

    def __init__(
        self, num_heads: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype, device: torch.device
    ) -> None:
        super().__init__(num_heads, num_kv_heads, head_dim, dtype, device)
        # Read once: whether IPEX's varlen kernel applies windows and soft-caps on this GPU.
        self.varlen_masks = bool(ipex.xpu.has_2d_block_array(torch.device(device).index or 0))

    def kv_buffer_shape(self, num_slots: int) -> tuple[int, ...]:
        """`[2, blocks, Hk, D, P]`: the decode kernel's layout for both halves."""
        if num_slots % self.page_size:
            raise ValueError(f"{num_slots} slots are not whole pages of {self.page_size}")
        return (2, num_slots // self.page_size, self.num_kv_heads, self.head_dim, self.page_size)

    def kv_bytes_per_token(self) -> int:
        # One slot is not a whole page, so the declared shape cannot be asked for one slot.
        return 2 * self.num_kv_heads * self.head_dim * self.kv_dtype.itemsize

    def plan(self, inputs: AttentionInputs) -> IpexMetadata:
        meta = IpexMetadata(inputs=inputs, new_slots=inputs.new_slots().to(self.device))
        if inputs.is_decode:
            meta.block_table = block_table(inputs, self.page_size).to(self.device)
            meta.context_lens = torch.tensor(inputs.seq_lens, dtype=torch.int32).to(self.device)
            meta.max_context_len = max(inputs.seq_lens, default=0)
        return meta

    def forward(self, q, k, v, kv_buffer, metadata: IpexMetadata, layer: AttentionLayer):
        if not q.shape[0]:
            return torch.empty_like(q), kv_buffer
        key_cache, value_cache = kv_buffer[0], kv_buffer[1]
        ipex.llm.modules.PagedAttention.reshape_and_cache(
            key=k.contiguous(),
            value=v.contiguous(),
            key_cache=key_cache.unsqueeze(-1),
            value_cache=value_cache,
            slot_mapping=metadata.new_slots,
        )
        masked = layer.sliding_window is not None or layer.logit_softcap is not None
        if metadata.block_table is not None and not masked:
            return self._decode(q, kv_buffer, metadata, layer), kv_buffer
        return self._extend(q, kv_buffer, metadata, layer, masked), kv_buffer

    def _decode(self, q: torch.Tensor, kv_buffer: torch.Tensor, meta: IpexMetadata, layer: AttentionLayer):
        out = torch.empty_like(q)
        ipex.llm.modules.PagedAttention.single_query_kv_attention(
            output=out,
            query=q.contiguous(),
            key_cache=kv_buffer[0],
            value_cache=kv_buffer[1],
            num_queries_per_tokens=self.num_heads // self.num_kv_heads,
            scale=layer.scale,
            block_tables=meta.block_table,
            context_lens=meta.context_lens,
            block_size=self.page_size,
            max_context_len=meta.max_context_len,
            alibi_slopes=None,
        )
        return out

    def _pack(self, inputs: AttentionInputs) -> PackedRows:
        rows = [i for i, e in enumerate(inputs.extend_lens) if e]
        starts = inputs.kv_starts
        slots = torch.cat([inputs.kv_slots[starts[i] : starts[i + 1]] for i in rows]).to(self.device)
        q_lens = tuple(inputs.extend_lens[i] for i in rows)
        k_lens = tuple(inputs.seq_lens[i] for i in rows)

        def offsets(lens: tuple[int, ...]) -> torch.Tensor:
            return torch.tensor([0, *accumulate(lens)], dtype=torch.int32).to(self.device)

        return PackedRows(
            q_lens=q_lens,
            k_lens=k_lens,
            cu_seqlens_q=offsets(q_lens),
            cu_seqlens_k=offsets(k_lens),
            blocks=slots // self.page_size,
            offsets=slots % self.page_size,
        )

    def _extend(
        self, q: torch.Tensor, kv_buffer: torch.Tensor, meta: IpexMetadata, layer: AttentionLayer, masked: bool
    ) -> torch.Tensor:
        if meta.packed is None:
            meta.packed = self._pack(meta.inputs)
        packed = meta.packed
        # [blocks, Hk, D, P] viewed as [blocks, P, Hk, D]: indexing by (block, offset) packs tokens.
        keys = kv_buffer[0].permute(0, 3, 1, 2)[packed.blocks, packed.offsets].contiguous()
        values = kv_buffer[1].permute(0, 3, 1, 2)[packed.blocks, packed.offsets].contiguous()
        if masked and not self.varlen_masks:
            return self._packed_reference(q, keys, values, packed, layer)
        window = layer.sliding_window
        out = torch.empty_like(q)
        ipex.llm.functional.varlen_attention(
            query=q.contiguous(),
            key=keys,
            value=values,
            out=out,
            seqlen_q=packed.cu_seqlens_q,
            seqlen_k=packed.cu_seqlens_k,
            alibi_slopes=None,
            max_seqlen_q=max(packed.q_lens),
            max_seqlen_k=max(packed.k_lens),
            pdropout=0.0,
            softmax_scale=layer.scale,
            zero_tensors=False,
            is_causal=True,
            return_softmax=False,
            gen_=None,
            window_size_left=NO_WINDOW if window is None else window - 1,
            window_size_right=NO_WINDOW if window is None else 0,
            softcap=NO_SOFTCAP if layer.logit_softcap is None else layer.logit_softcap,
        )
        return out

    def _packed_reference(
        self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, packed: PackedRows, layer: AttentionLayer
    ) -> torch.Tensor:
        """Our reference over the packed rows, seen as a default-layout buffer of `keys` slots."""
        inputs = AttentionInputs(
            seq_lens=packed.k_lens,
            extend_lens=packed.q_lens,
            kv_slots=torch.arange(keys.shape[0], device=keys.device),
        )
        reference = ReferenceAttention(self.num_heads, self.num_kv_heads, self.head_dim, self.dtype, self.device)
        meta = reference.plan(inputs)
        new = meta.new_slots
        # The reference stores the new tokens before reading: they are already in the packed buffer.
        out, _ = reference.forward(q, keys[new], values[new], torch.stack([keys, values]), meta, layer)
        return out
