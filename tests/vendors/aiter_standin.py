"""A recording stand-in of AMD's `aiter` (paged_attention_ragged, flash_attn_varlen_func,
rmsnorm2d_fwd(_with_add), fused_moe over shuffled weights), computing with our references.

The MoE rules, from ROCm/aiter (main of 2026-08):
- `shuffle_weight` (aiter/ops/shuffle.py) asserts `x.shape[-2] % 16 == 0` and
  `x.shape[-1] % 32 == 0` for layout (16, 16), returns a new tensor and sets `is_shuffled` on it;
- `fused_moe` (aiter/fused_moe.py `_fused_moe_impl`) reads `is_shuffled` off w1 and w2, asserts
  the output dtype is fp16 or bf16 and w1 `[E, 2 * inter, model_dim]` against w2
  `[E, model_dim, inter]` (`get_inter_dim`); ActivationType is Silu = 0, Gelu = 1
  (csrc/include/aiter_enum.h).
The stand-in's own tile layout is a reversible flip, not AITER's: only the rules are the vendor's.
"""

from __future__ import annotations

import enum
import itertools
import math

import torch

from sglang.ops.moe import moe_experts
from sglang.ops.norm import fused_add_rms_norm, rms_norm

from .standin import Recorder, expect, expect_tensor, layer_from, module, reference_attention, token_slots

PARTITION_SIZE = 256


class ActivationType(enum.Enum):
    Silu = 0
    Gelu = 1


def build(recorder: Recorder) -> dict:
    def rmsnorm2d_fwd(input, weight, epsilon):
        expect_tensor(input, "input", ndim=2)
        recorder.record("rmsnorm2d_fwd", epsilon=epsilon)
        return rms_norm(input, weight, epsilon)

    def rmsnorm2d_fwd_with_add(out, input, residual_in, residual_out, weight, epsilon):
        for t, what in ((out, "out"), (input, "input"), (residual_in, "residual_in"), (residual_out, "residual_out")):
            expect_tensor(t, what, ndim=2)
        expect(out.data_ptr() != input.data_ptr(), "out must be its own buffer")
        recorder.record("rmsnorm2d_fwd_with_add", epsilon=epsilon)
        normed, summed = fused_add_rms_norm(input, residual_in, weight, epsilon)
        out.copy_(normed)
        residual_out.copy_(summed)

    def paged_attention_ragged(
        out,
        workspace_buffer,
        query,
        key_cache,
        value_cache,
        scale,
        kv_indptr,
        kv_page_indices,
        kv_last_page_lens,
        block_size,
        max_num_partitions,
        alibi_slopes,
        kv_cache_dtype,
        kv_cache_layout,
        logits_soft_cap,
        k_scale,
        v_scale,
        fp8_out_scale=None,
        partition_size=256,
        mtp=1,
    ):
        expect(kv_cache_layout == "NHD" and kv_cache_dtype == "auto", "NHD pages in the model dtype")
        rows, heads, dim = expect_tensor(query, "query", ndim=3).shape
        kv_heads = key_cache.shape[2]
        expect(tuple(key_cache.shape[1:]) == (block_size, kv_heads, dim), "key_cache is [pages, P, Hk, D]")
        for t, what in (
            (kv_indptr, "kv_indptr"),
            (kv_page_indices, "kv_page_indices"),
            (kv_last_page_lens, "kv_last_page_lens"),
        ):
            expect_tensor(t, what, dtype=torch.int32, device_type=query.device.type, ndim=1)
        indptr, last = kv_indptr.tolist(), kv_last_page_lens.tolist()
        lens = [(indptr[i + 1] - indptr[i] - 1) * block_size + last[i] for i in range(rows)]
        expect(max_num_partitions >= math.ceil(max(lens) / partition_size), "too few partitions for the longest row")
        need = (rows * heads * max_num_partitions * dim + 2 * rows * heads * max_num_partitions) * 4
        expect_tensor(workspace_buffer, "workspace_buffer", dtype=torch.uint8)
        expect(workspace_buffer.numel() >= need, f"workspace {workspace_buffer.numel()} B < {need} B")
        expect(float(k_scale) == 1.0 and float(v_scale) == 1.0, "unquantized KV has unit scales")
        recorder.record("paged_attention_ragged", rows=rows, partitions=max_num_partitions)
        slots = [token_slots(kv_page_indices[indptr[i] : indptr[i + 1]], block_size, lens[i]) for i in range(rows)]
        buffer = torch.stack([key_cache.flatten(0, 1), value_cache.flatten(0, 1)])
        layer = layer_from(scale, None, logits_soft_cap)
        out.copy_(reference_attention(query, buffer, lens, [1] * rows, slots, layer))
        return out

    def flash_attn_varlen_func(
        q,
        k,
        v,
        cu_seqlens_q,
        cu_seqlens_k,
        max_seqlen_q,
        max_seqlen_k,
        dropout_p=0.0,
        softmax_scale=None,
        logits_soft_cap=0.0,
        causal=False,
        window_size=(-1, -1),
    ):
        for t, what in ((q, "q"), (k, "k"), (v, "v")):
            expect_tensor(t, what, ndim=3)
        for t, what in ((cu_seqlens_q, "cu_seqlens_q"), (cu_seqlens_k, "cu_seqlens_k")):
            expect_tensor(t, what, dtype=torch.int32, device_type=q.device.type, ndim=1)
        expect(causal and dropout_p == 0.0, "inference extend attention is causal without dropout")
        cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
        q_lens = [b - a for a, b in itertools.pairwise(cq)]
        k_lens = [b - a for a, b in itertools.pairwise(ck)]
        expect(max_seqlen_q == max(q_lens) and max_seqlen_k == max(k_lens), "max lengths match the offsets")
        expect(window_size[1] in (-1, 0), "nothing right of the query is visible")
        recorder.record("flash_attn_varlen_func", window_size=window_size)
        window = window_size[0] + 1 if window_size[0] >= 0 else None
        slots = [torch.arange(a, b) for a, b in itertools.pairwise(ck)]
        return reference_attention(
            q, torch.stack([k, v]), k_lens, q_lens, slots, layer_from(softmax_scale, window, logits_soft_cap)
        )

    def shuffle_weight(x, layout=(16, 16)):
        expect(layout == (16, 16), "AITER's MoE kernels read 16x16 tiles")
        expect(x.shape[-2] % 16 == 0, f"{x.shape[-2]} % 16 == {x.shape[-2] % 16}")
        expect(x.shape[-1] % 32 == 0, f"{x.shape[-1]} % 32 == {x.shape[-1] % 32}")
        recorder.record("shuffle_weight", shape=tuple(x.shape))
        tiled = x.flip(-1).contiguous()  # any reversible layout change: fused_moe undoes it
        tiled.is_shuffled = True
        return tiled

    def fused_moe(hidden_states, w1, w2, topk_weight, topk_ids, expert_mask=None, activation=ActivationType.Silu):
        for w, what in ((w1, "w1"), (w2, "w2")):
            expect(getattr(w, "is_shuffled", False), f"{what} must be passed through shuffle_weight")
        expect(hidden_states.dtype in (torch.float16, torch.bfloat16), "Fused_moe unsupported out dtype")
        experts, inter2, model_dim = w1.shape
        expect(tuple(w2.shape) == (experts, model_dim, inter2 // 2), "Invalid MoE weight: w1/w2 shapes disagree")
        expect_tensor(topk_ids, "topk_ids", dtype=torch.int32, ndim=2)
        expect_tensor(topk_weight, "topk_weight", dtype=torch.float32, ndim=2)
        expect(activation is ActivationType.Silu, "the adapter sends SiLU only")
        recorder.record("fused_moe", tokens=hidden_states.shape[0])
        return moe_experts(hidden_states, w1.flip(-1), w2.flip(-1), topk_weight, topk_ids.long(), "silu")

    ops = module("aiter.ops")
    shuffle = module("aiter.ops.shuffle", shuffle_weight=shuffle_weight)
    fused = module("aiter.fused_moe", fused_moe=fused_moe)
    ops.shuffle = shuffle
    root = module(
        "aiter",
        ops=ops,
        fused_moe=fused,
        ActivationType=ActivationType,
        rmsnorm2d_fwd=rmsnorm2d_fwd,
        rmsnorm2d_fwd_with_add=rmsnorm2d_fwd_with_add,
        paged_attention_ragged=paged_attention_ragged,
        flash_attn_varlen_func=flash_attn_varlen_func,
    )
    return {"aiter": root, "aiter.ops": ops, "aiter.ops.shuffle": shuffle, "aiter.fused_moe": fused}
