"""A recording stand-in of `torch_npu` (npu_fused_infer_attention_score over a block table,
npu_rms_norm, npu_add_rms_norm, npu_swiglu), computing with our references."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from sglang.ops.norm import rms_norm

from .standin import Recorder, expect, expect_tensor, layer_from, module, reference_attention, token_slots


def build(recorder: Recorder) -> dict:
    def npu_rms_norm(x, gamma, epsilon=1e-6):
        recorder.record("npu_rms_norm", epsilon=epsilon)
        return rms_norm(x, gamma, epsilon), torch.ones(x.shape[:-1])

    def npu_add_rms_norm(x1, x2, gamma, epsilon=1e-6):
        recorder.record("npu_add_rms_norm", epsilon=epsilon)
        summed = x1 + x2
        return rms_norm(summed, gamma, epsilon), torch.ones(x1.shape[:-1]), summed

    def npu_swiglu(x, dim=-1):
        expect(dim == -1, "the gate/up split is on the last dimension")
        recorder.record("npu_swiglu")
        gate, up = x.chunk(2, dim=-1)
        return F.silu(gate) * up

    def npu_fused_infer_attention_score(
        query,
        key,
        value,
        *,
        atten_mask=None,
        actual_seq_lengths=None,
        actual_seq_lengths_kv=None,
        block_table=None,
        num_heads=1,
        scale=1.0,
        pre_tokens=2147483647,
        next_tokens=2147483647,
        input_layout="BSH",
        num_key_value_heads=0,
        sparse_mode=0,
        block_size=0,
    ):
        expect(isinstance(actual_seq_lengths_kv, list), "actual_seq_lengths_kv is a host list")
        expect(actual_seq_lengths is None or isinstance(actual_seq_lengths, list), "actual_seq_lengths is a host list")
        expect_tensor(block_table, "block_table", dtype=torch.int32, device_type=query.device.type, ndim=2)
        expect(block_size % 16 == 0 and 16 <= block_size <= 512, f"block_size {block_size}: a multiple of 16 to 512")
        expect(key.dim() == 3 and key.shape[1] == block_size, "paged key is [blocks, block_size, Hk * D]")
        dim = key.shape[2] // num_key_value_heads
        rows = block_table.shape[0]
        expect(len(actual_seq_lengths_kv) == rows, "one KV length per block-table row")
        if input_layout == "BSH":
            expect(tuple(query.shape) == (rows, 1, num_heads * dim), "decode query is [B, 1, H * D]")
            q = query.view(rows, num_heads, dim)
            extend = [1] * rows
            window = None
        else:
            expect(input_layout == "BSND" and rows == 1 and query.dim() == 4, "one sequence per BSND call")
            expect(
                sparse_mode in (3, 4) and atten_mask is not None and atten_mask.shape == (2048, 2048),
                "causal attention takes sparse mode 3/4 with the 2048x2048 mask",
            )
            expect(next_tokens == 0, "nothing right of the query is visible")
            q = query[0]
            extend = actual_seq_lengths
            window = pre_tokens + 1 if sparse_mode == 4 else None
        recorder.record("npu_fused_infer_attention_score", layout=input_layout, lengths=list(actual_seq_lengths_kv))
        lens = actual_seq_lengths_kv
        slots = [token_slots(block_table[r, : -(-lens[r] // block_size)], block_size, lens[r]) for r in range(rows)]
        buffer = torch.stack([key.reshape(-1, num_key_value_heads, dim), value.reshape(-1, num_key_value_heads, dim)])
        out = reference_attention(q, buffer, lens, extend, slots, layer_from(scale, window, None))
        return out.view(query.shape), None

    root = module(
        "torch_npu",
        npu_rms_norm=npu_rms_norm,
        npu_add_rms_norm=npu_add_rms_norm,
        npu_swiglu=npu_swiglu,
        npu_fused_infer_attention_score=npu_fused_infer_attention_score,
    )
    return {"torch_npu": root}
