"""Paged attention with torch's fused scaled-dot-product kernel (SDPA).

Decode rows (one new token) are batched: their cached K/V are gathered into a padded
`[B, Hk, L, D]` block with a validity mask, and one SDPA call with grouped-query broadcasting
(`enable_gqa`) serves them all. Extend rows (prefill, possibly after a cached prefix) run one
SDPA call per sequence with a bottom-right causal mask. GQA broadcasting inside SDPA is several
times faster on a CPU than repeating K/V first.

Attention sinks (gpt-oss) stay in SDPA: one zero key and value are appended, and the additive
mask gives that key each head's sink logit, so it enters the softmax's denominator only.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from sglang.ops import store_kv as reference_store_kv
from sglang.ops.attention import (
    AttentionBackend,
    AttentionInputs,
    AttentionMetadata,
    ReferenceAttention,
    visible_mask,
)


@dataclass
class SdpaAttentionMetadata(AttentionMetadata):
    decode_rows: torch.Tensor | None = None
    """Indices (into the batch) of decode sequences, batched together."""
    decode_q_index: torch.Tensor | None = None
    """Packed-token index of each decode row's query."""
    decode_slots: torch.Tensor | None = None
    """`[Bd, Lmax]` cache slots per decode row, padded with the row's own last slot: padding is
    masked out, but a masked NaN still poisons SDPA (0 * NaN), and a free slot may hold NaN."""
    decode_valid: torch.Tensor | None = None
    """`[Bd, 1, 1, Lmax]` bool: which padded positions are real (and inside the window)."""
    decode_seq_lens: torch.Tensor | None = None
    extend_rows: tuple[int, ...] = ()


class SdpaAttention(AttentionBackend):
    decode_rows_see_each_other = True  # `forward` stores every new K/V row before any attention
    serves_window_slots = True  # token-level slot lists; keys outside the window are masked out
    kv_cache_dtypes = (torch.bfloat16,)  # gathered rows are converted to the query's dtype

    def plan(self, inputs: AttentionInputs) -> SdpaAttentionMetadata:
        decode = [i for i, e in enumerate(inputs.extend_lens) if e == 1]
        extend = tuple(i for i, e in enumerate(inputs.extend_lens) if e > 1)
        meta = SdpaAttentionMetadata(inputs=inputs, new_slots=inputs.new_slots(), extend_rows=extend)
        if decode:
            lens = torch.tensor([inputs.seq_lens[i] for i in decode])
            max_len = int(lens.max())
            slots = torch.zeros(len(decode), max_len, dtype=torch.long)
            kv_starts = inputs.kv_starts
            for row, i in enumerate(decode):
                own = inputs.kv_slots[kv_starts[i] : kv_starts[i + 1]]
                slots[row] = own[-1]
                slots[row, : inputs.seq_lens[i]] = own
            meta.decode_rows = torch.tensor(decode)
            meta.decode_q_index = torch.tensor([inputs.q_starts[i] for i in decode])
            meta.decode_slots = slots.to(self.device)
            meta.decode_seq_lens = lens
            meta.decode_valid = (torch.arange(max_len)[None, :] < lens[:, None])[:, None, None, :]
        return meta

    def forward(self, q, k, v, kv_buffer, metadata, layer, sinks=None):
        if layer.logit_softcap is not None:
            # SDPA has no logit soft-capping; the reference computes it exactly.
            return ReferenceAttention.forward(self, q, k, v, kv_buffer, metadata, layer, sinks)
        kv_buffer = reference_store_kv(kv_buffer, metadata.new_slots, k, v)
        out = torch.empty_like(q)
        if metadata.decode_rows is not None:
            out[metadata.decode_q_index] = self._decode(q, kv_buffer, metadata, layer, sinks)
        inputs = metadata.inputs
        q_starts, kv_starts = inputs.q_starts, inputs.kv_starts
        for i in metadata.extend_rows:
            seq_len, prefix_len = inputs.seq_lens[i], inputs.prefix_lens[i]
            slots = inputs.kv_slots[kv_starts[i] : kv_starts[i + 1]]
            queries = q[q_starts[i] : q_starts[i + 1]].transpose(0, 1)
            keys = kv_buffer[0, slots].transpose(0, 1).to(q.dtype)
            values = kv_buffer[1, slots].transpose(0, 1).to(q.dtype)
            if prefix_len == 0 and layer.sliding_window is None and sinks is None:
                mask, causal = None, True
            else:
                positions = torch.arange(prefix_len, seq_len, device=q.device)
                mask, causal = visible_mask(positions, seq_len, layer.sliding_window), False
            if sinks is not None:
                keys, values, mask = with_sink_key(keys, values, mask.expand(queries.shape[0], -1, -1), sinks)
            # With a batch dimension: torch's CPU SDPA takes its flash kernel only for 4-D inputs
            # (3-D ones take the math path: 3.7x slower on a 536-token prefill of 9/3 heads).
            attended = F.scaled_dot_product_attention(
                queries[None],
                keys[None],
                values[None],
                attn_mask=mask,
                is_causal=causal,
                scale=layer.scale,
                enable_gqa=True,
            )
            out[q_starts[i] : q_starts[i + 1]] = attended[0].transpose(0, 1)
        return out, kv_buffer

    def _decode(self, q, kv_buffer, meta: SdpaAttentionMetadata, layer, sinks=None) -> torch.Tensor:
        queries = q[meta.decode_q_index].unsqueeze(2)
        keys = kv_buffer[0][meta.decode_slots].transpose(1, 2).to(q.dtype)
        values = kv_buffer[1][meta.decode_slots].transpose(1, 2).to(q.dtype)
        valid = meta.decode_valid
        if layer.sliding_window is not None:
            positions = torch.arange(valid.shape[-1])
            in_window = positions[None, :] >= (meta.decode_seq_lens[:, None] - layer.sliding_window)
            valid = valid & in_window[:, None, None, :]
        if sinks is not None:
            keys, values, valid = with_sink_key(keys, values, valid.expand(-1, queries.shape[1], -1, -1), sinks)
        attended = F.scaled_dot_product_attention(
            queries, keys, values, attn_mask=valid, scale=layer.scale, enable_gqa=True
        )
        return attended.squeeze(2)


def with_sink_key(
    keys: torch.Tensor, values: torch.Tensor, visible: torch.Tensor, sinks: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """SDPA inputs that attend to sinks: `keys`/`values` `[..., Hk, L, D]` with one zero row
    appended (its score is 0), and `visible` (bool `[..., Hq, Lq, L]`) as an additive float mask
    whose appended column is each query head's sink logit, so the sink weighs in the softmax
    and contributes no value."""
    zeros = keys.new_zeros(*keys.shape[:-2], 1, keys.shape[-1])
    bias = torch.zeros(visible.shape, dtype=keys.dtype, device=keys.device).masked_fill(~visible, float("-inf"))
    heads = visible.shape[-3]
    sink_column = sinks.to(keys.dtype).view(heads, 1, 1).expand(*visible.shape[:-1], 1)
    return torch.cat([keys, zeros], dim=-2), torch.cat([values, zeros], dim=-2), torch.cat([bias, sink_column], dim=-1)
