"""Paged attention through `torch_npu.npu_fused_infer_attention_score` over a block table.

The KV buffer keeps the default layout; viewing each half as `[blocks, page_size, Hk * D]` gives
the operator's paged BSH cache without a copy. Lengths go as host lists (`actual_seq_lengths*`,
which the operator reads on the host to tile its work); the block table `[rows, max_blocks]`
int32 goes on the device. Decode steps without a sliding window run as one batched call
(`BSH`, one query token per row); other rows run one call each (`BSND`), causal from the bottom
right (`sparse_mode=3` with the operator's 2048x2048 mask), or banded for a window
(`sparse_mode=4`, `pre_tokens = window - 1`). The operator has no logit soft-cap: such layers
take the reference.

Decode steps are not captured into NPU graphs (`init_capture` says why): the host lengths are
read when the operator is launched, so a replayed graph would attend over the lengths it was
captured with.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch_npu

from sglang import ops
from sglang.ops.attention import (
    AttentionBackend,
    AttentionInputs,
    AttentionLayer,
    AttentionMetadata,
    CaptureLimits,
    ReferenceAttention,
)
from sglang.platforms.kernels.page_views import block_table

MASK_SIZE = 2048
"""The compressed causal mask the operator takes with sparse modes 2-4."""
ALL_TOKENS = 2147483647


@dataclass
class NpuMetadata(AttentionMetadata):
    block_table: torch.Tensor | None = field(default=None, repr=False)
    """`[rows, max_blocks]` int32, on the device."""


class NpuAttention(AttentionBackend):
    def __init__(
        self, num_heads: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype, device: torch.device
    ) -> None:
        super().__init__(num_heads, num_kv_heads, head_dim, dtype, device)
        self.causal_mask = torch.triu(torch.ones(MASK_SIZE, MASK_SIZE, dtype=torch.bool), diagonal=1).to(device)

    def plan(self, inputs: AttentionInputs) -> NpuMetadata:
        table = block_table(inputs, self.page_size).to(self.device)
        return NpuMetadata(inputs=inputs, new_slots=inputs.new_slots().to(self.device), block_table=table)

    def init_capture(self, limits: CaptureLimits) -> str | None:
        return (
            "torch_npu's fused infer attention takes sequence lengths as host lists, read at launch: "
            "a replayed NPU graph would keep the captured lengths (updating them per replay, "
            "NPUGraph.update(cpu_update_input=...), is not wired)"
        )

    def forward(self, q, k, v, kv_buffer, metadata: NpuMetadata, layer: AttentionLayer):
        if layer.logit_softcap is not None:
            return ReferenceAttention.forward(self, q, k, v, kv_buffer, metadata, layer)
        kv_buffer = ops.store_kv(kv_buffer, metadata.new_slots, k, v)
        blocks = kv_buffer.shape[1] // self.page_size
        key = kv_buffer[0].view(blocks, self.page_size, self.num_kv_heads * self.head_dim)
        value = kv_buffer[1].view(blocks, self.page_size, self.num_kv_heads * self.head_dim)
        inputs = metadata.inputs
        common = dict(
            block_table=metadata.block_table,
            num_heads=self.num_heads,
            scale=layer.scale,
            num_key_value_heads=self.num_kv_heads,
            block_size=self.page_size,
        )
        if inputs.is_decode and layer.sliding_window is None:
            query = q.reshape(q.shape[0], 1, self.num_heads * self.head_dim).contiguous()
            out, _ = torch_npu.npu_fused_infer_attention_score(
                query, key, value, actual_seq_lengths_kv=list(inputs.seq_lens), input_layout="BSH", **common
            )
            return out.view(q.shape), kv_buffer
        out = torch.empty_like(q)
        window = layer.sliding_window
        sparse = (
            dict(sparse_mode=3, pre_tokens=ALL_TOKENS, next_tokens=0)
            if window is None
            else dict(sparse_mode=4, pre_tokens=window - 1, next_tokens=0)
        )
        starts = inputs.q_starts
        for row, (seq_len, extend) in enumerate(zip(inputs.seq_lens, inputs.extend_lens)):
            if not extend:
                continue
            query = q[starts[row] : starts[row + 1]].unsqueeze(0).contiguous()
            attended, _ = torch_npu.npu_fused_infer_attention_score(
                query,
                key,
                value,
                atten_mask=self.causal_mask,
                actual_seq_lengths=[extend],
                actual_seq_lengths_kv=[seq_len],
                input_layout="BSND",
                **{**common, "block_table": metadata.block_table[row : row + 1]},
                **sparse,
            )
            out[starts[row] : starts[row + 1]] = attended.squeeze(0)
        return out, kv_buffer
