"""Paged attention through AITER: `paged_attention_ragged` for decode, `flash_attn_varlen_func`
for everything else.

The KV buffer keeps the default layout; its halves view as NHD blocks `[pages, P, Hk, D]`.
Decode steps (every row one new token, no sliding window: the ragged kernel has none) read the
cache through the CSR page view (`kv_indptr`, `kv_page_indices`, `kv_last_page_lens`, int32 on
the device) with a workspace sized for the step's partitions. The ragged kernel takes pages of
at most 32 tokens that divide its 256-token partition (the family declares them). Other steps gather each
sequence's K/V by slot into packed `[sum(seq_lens), Hk, D]` tensors and run varlen attention,
causal (aligned bottom-right, which covers cached prefixes) with the window as `(left, 0)`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import aiter
import torch

from sglang import ops
from sglang.ops.attention import AttentionBackend, AttentionInputs, AttentionLayer, AttentionMetadata
from sglang.platforms.kernels.page_views import csr_pages

PARTITION_SIZE = 256
"""KV positions per partition of AITER's split decode (its default)."""


def workspace_bytes(rows: int, heads: int, head_dim: int, partitions: int, dtype: torch.dtype) -> int:
    """Exp-sums and max-logits `[rows, heads, partitions]` in float32, then the partial outputs
    `[rows, heads, partitions, D]` in the query's dtype: how AITER's ragged kernel carves the
    buffer (csrc/cpp_itfs/pa/pa_ragged.cpp.jinja) and sizes it (op_tests/test_pa_ragged.py)."""
    partials = rows * heads * partitions
    return partials * head_dim * torch.empty((), dtype=dtype).element_size() + 2 * partials * 4


@dataclass
class AiterMetadata(AttentionMetadata):
    kv_indptr: torch.Tensor | None = field(default=None, repr=False)
    kv_page_indices: torch.Tensor | None = field(default=None, repr=False)
    kv_last_page_lens: torch.Tensor | None = field(default=None, repr=False)
    max_num_partitions: int = 0
    workspace: torch.Tensor | None = field(default=None, repr=False)
    cu_seqlens_q: torch.Tensor | None = field(default=None, repr=False)
    cu_seqlens_k: torch.Tensor | None = field(default=None, repr=False)
    kv_slots: torch.Tensor | None = field(default=None, repr=False)


class AiterAttention(AttentionBackend):
    def plan(self, inputs: AttentionInputs) -> AiterMetadata:
        dev = self.device
        meta = AiterMetadata(inputs=inputs, new_slots=inputs.new_slots().to(dev))
        longest = max(inputs.seq_lens, default=1)
        if inputs.is_decode:
            pages = csr_pages(inputs, self.page_size)
            meta.kv_indptr = pages.indptr.to(dev)
            meta.kv_page_indices = pages.indices.to(dev)
            meta.kv_last_page_lens = pages.last_page_len.to(dev)
            meta.max_num_partitions = math.ceil(longest / PARTITION_SIZE)
            size = workspace_bytes(
                len(inputs.seq_lens), self.num_heads, self.head_dim, meta.max_num_partitions, self.dtype
            )
            meta.workspace = torch.empty(size, dtype=torch.uint8, device=dev)
        meta.cu_seqlens_q = torch.tensor(inputs.q_starts, dtype=torch.int32).to(dev)
        meta.cu_seqlens_k = torch.tensor(inputs.kv_starts, dtype=torch.int32).to(dev)
        meta.kv_slots = inputs.kv_slots.to(dev)
        return meta

    def forward(self, q, k, v, kv_buffer, metadata: AiterMetadata, layer: AttentionLayer):
        kv_buffer = ops.store_kv(kv_buffer, metadata.new_slots, k, v)
        if not q.shape[0]:
            return torch.empty_like(q), kv_buffer
        if metadata.kv_indptr is not None and layer.sliding_window is None:
            return self._decode(q, kv_buffer, metadata, layer), kv_buffer
        inputs = metadata.inputs
        window = (layer.sliding_window - 1, 0) if layer.sliding_window is not None else (-1, -1)
        out = aiter.flash_attn_varlen_func(
            q.contiguous(),
            kv_buffer[0][metadata.kv_slots],
            kv_buffer[1][metadata.kv_slots],
            cu_seqlens_q=metadata.cu_seqlens_q,
            cu_seqlens_k=metadata.cu_seqlens_k,
            max_seqlen_q=max(inputs.extend_lens),
            max_seqlen_k=max(inputs.seq_lens),
            dropout_p=0.0,
            softmax_scale=layer.scale,
            logits_soft_cap=layer.logit_softcap or 0.0,
            causal=True,
            window_size=window,
        )
        return out, kv_buffer

    def _decode(self, q, kv_buffer, meta: AiterMetadata, layer: AttentionLayer) -> torch.Tensor:
        pages = kv_buffer.shape[1] // self.page_size
        shape = (pages, self.page_size, self.num_kv_heads, self.head_dim)
        out = torch.empty_like(q)
        unit = torch.ones((), dtype=torch.float32, device=q.device)
        aiter.paged_attention_ragged(
            out=out,
            workspace_buffer=meta.workspace,
            query=q.contiguous(),
            key_cache=kv_buffer[0].view(shape),
            value_cache=kv_buffer[1].view(shape),
            scale=layer.scale,
            kv_indptr=meta.kv_indptr,
            kv_page_indices=meta.kv_page_indices,
            kv_last_page_lens=meta.kv_last_page_lens,
            block_size=self.page_size,
            max_num_partitions=meta.max_num_partitions,
            alibi_slopes=None,
            kv_cache_dtype="auto",
            kv_cache_layout="NHD",
            logits_soft_cap=layer.logit_softcap or 0.0,
            k_scale=unit,
            v_scale=unit,
            partition_size=PARTITION_SIZE,
        )
        return out
