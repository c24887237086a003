"""Paged attention through `torch_npu.npu_fused_infer_attention_score` over a block table.

The KV buffer keeps the default layout; viewing each half as `[blocks, page_size, Hk * D]` gives
the operator's paged BSH cache (its BnBsH layout) without a copy. Lengths go as host lists
(`actual_seq_lengths*`, per sequence, which the operator reads on the host to tile its work);
the block table `[rows, max_blocks]` int32 goes on the device.

The operator has two branches, chosen by the query's sequence length (Ascend op-plugin's API
page for this function), and the adapter sends each row to the one that serves it:
- Rows with one new token (every decode row, and the decode rows of a mixed step) go in one
  batched `BSH` call, one query token per row. That branch ignores `sparse_mode`, `pre_tokens`
  and `next_tokens`: a single last-position query needs no causal mask, and a sliding window
  goes as an explicit `(rows, max_blocks * page_size)` bool mask (True: masked), the only mask
  shape it takes with a block table.
- Rows with several new tokens run one `BSND` call each, causal from the bottom right
  (`sparse_mode=3` with the operator's 2048x2048 compressed mask), or banded for a window
  (`sparse_mode=4`, `pre_tokens = window - 1`). Over a block table this branch takes blocks of
  128 to 512 tokens in steps of 128, which is why the family declares those page sizes.
The operator has no logit soft-cap: such layers take the reference.

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
    single_lens: list[int] = field(default_factory=list)
    """KV lengths of the rows with one new token, which go in one batched call."""
    single_tokens: torch.Tensor | None = field(default=None, repr=False)
    """Their query tokens' positions in `q` (int64, on the device)."""
    single_table: torch.Tensor | None = field(default=None, repr=False)
    """Their block-table rows."""
    window_masks: dict[int, torch.Tensor] = field(default_factory=dict, repr=False)
    """Per sliding window: the batched call's mask, built by the first layer that needs it."""


class NpuAttention(AttentionBackend):
    def __init__(
        self, num_heads: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype, device: torch.device
    ) -> None:
        super().__init__(num_heads, num_kv_heads, head_dim, dtype, device)
        self.causal_mask = torch.triu(torch.ones(MASK_SIZE, MASK_SIZE, dtype=torch.bool), diagonal=1).to(device)

    def plan(self, inputs: AttentionInputs) -> NpuMetadata:
        table = block_table(inputs, self.page_size).to(self.device)
        meta = NpuMetadata(inputs=inputs, new_slots=inputs.new_slots().to(self.device), block_table=table)
        singles = [row for row, extend in enumerate(inputs.extend_lens) if extend == 1]
        if singles:
            starts = inputs.q_starts
            meta.single_lens = [inputs.seq_lens[row] for row in singles]
            meta.single_tokens = torch.tensor([starts[row] for row in singles]).to(self.device)
            meta.single_table = table if len(singles) == len(inputs.extend_lens) else table[singles]
        return meta

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
        common = dict(
            num_heads=self.num_heads,
            scale=layer.scale,
            num_key_value_heads=self.num_kv_heads,
            block_size=self.page_size,
        )
        inputs = metadata.inputs
        starts = inputs.q_starts
        out = torch.empty_like(q)
        window = layer.sliding_window
        if metadata.single_lens:
            tokens, lens = metadata.single_tokens, metadata.single_lens
            attended, _ = torch_npu.npu_fused_infer_attention_score(
                q[tokens].reshape(len(lens), 1, self.num_heads * self.head_dim),
                key,
                value,
                atten_mask=None if window is None else self._window_mask(metadata, window),
                actual_seq_lengths_kv=lens,
                block_table=metadata.single_table,
                input_layout="BSH",
                **common,
            )
            out[tokens] = attended.view(len(lens), self.num_heads, self.head_dim)
        sparse = (
            dict(sparse_mode=3, pre_tokens=ALL_TOKENS, next_tokens=0)
            if window is None
            else dict(sparse_mode=4, pre_tokens=window - 1, next_tokens=0)
        )
        for row, (seq_len, extend) in enumerate(zip(inputs.seq_lens, inputs.extend_lens)):
            if extend < 2:
                continue
            query = q[starts[row] : starts[row + 1]].unsqueeze(0).contiguous()
            attended, _ = torch_npu.npu_fused_infer_attention_score(
                query,
                key,
                value,
                atten_mask=self.causal_mask,
                actual_seq_lengths=[extend],
                actual_seq_lengths_kv=[seq_len],
                block_table=metadata.block_table[row : row + 1],
                input_layout="BSND",
                **common,
                **sparse,
            )
            out[starts[row] : starts[row + 1]] = attended.squeeze(0)
        return out, kv_buffer

    def _window_mask(self, metadata: NpuMetadata, window: int) -> torch.Tensor:
        """`(rows, max_blocks * page_size)` bool for the one-token rows: True left of each row's
        last `window` tokens."""
        if window not in metadata.window_masks:
            positions = torch.arange(metadata.single_table.shape[1] * self.page_size)
            first = torch.tensor([max(n - window, 0) for n in metadata.single_lens])
            metadata.window_masks[window] = (positions[None, :] < first[:, None]).to(self.device)
        return metadata.window_masks[window]
