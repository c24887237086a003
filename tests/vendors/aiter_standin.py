"""A recording stand-in of AMD's `aiter` (paged_attention_ragged, flash_attn_varlen_func,
`aiter.mla.mla_decode_fwd` (`aiter_mla_standin`), rmsnorm2d_fwd(_with_add), fused_moe over
shuffled weights), computing with our references.

Every rule below was read from ROCm/aiter at commit e4048607a535ace3a2b51ded31b1c8c2d45c0879
(main of 2026-08-22); each check names the file and function it comes from.

Attention:
- `paged_attention_ragged` (aiter/ops/attention.py, which calls csrc/cpp_itfs/pa/pa_ragged.py
  `paged_attention_ragged`): query and out fp16/bf16 (else ValueError "Unsupported data type");
  `kv_cache_layout` NHD reads keys and values as `[pages, P, Hk, D]` (heads from dim 2, token
  stride from dim 1); the CSR arrays are read as int32 pointers; `k_scale`/`v_scale` are read
  through `data_ptr()` as float32 tensors, not Python floats. The kernel template
  (csrc/cpp_itfs/pa/pa_kernels.cuh `paged_attention_ll4mi_QKV_mfma16_kernel`) asserts
  `BLOCK_SIZE <= 32` for 16-bit KV and splits the head dim over 4 warps of 16 lanes (a
  multiple of 64); op_tests/test_pa_ragged.py asserts the partition size is a multiple of the
  block size. The workspace holds exp-sums and max-logits `[rows, heads, partitions]` float32,
  then the partial outputs `[rows, heads, partitions, D]` in the query's dtype
  (csrc/cpp_itfs/pa/pa_ragged.cpp.jinja); op_tests/test_pa_ragged.py sizes it exactly so.
- `flash_attn_varlen_func` (aiter/ops/mha.py): parameters in that order (`min_seqlen_q` is
  eighth, so everything after `max_seqlen_k` goes by keyword); q/k/v `[tokens, heads, D]` with
  query heads a multiple of KV heads; `cu_seqlens_*` int32; causal aligned bottom-right;
  `window_size` is `(left, right)` or `(left, right, sink)`; returns `out` alone unless
  `return_lse`/`return_attn_probs`.
- `rmsnorm2d_fwd(input, weight, epsilon)` returns the output; `rmsnorm2d_fwd_with_add(out,
  input, residual_in, residual_out, weight, epsilon)` writes both outputs (aiter/ops/rmsnorm.py).

MoE:
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

from . import aiter_mla_standin
from .standin import Recorder, expect, expect_tensor, layer_from, module, reference_attention, token_slots

_HALF = (torch.float16, torch.bfloat16)


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
        dev = query.device.type
        rows, heads, dim = expect_tensor(query, "query", ndim=3).shape
        # pa_ragged.py `paged_attention_ragged`: kv_cache_dtype "auto" takes fp16/bf16 queries only.
        expect(query.dtype in _HALF and out.dtype in _HALF, f"Unsupported data type: {query.dtype}")
        expect(kv_cache_layout == "NHD" and kv_cache_dtype == "auto", "NHD pages in the model dtype")
        # pa_kernels.cuh: `static_assert(BLOCK_SIZE <= k_thread_per_block)`, 32 for 16-bit KV;
        # op_tests/test_pa_ragged.py: `assert _PARTITION_SIZE_ROCM % block_size == 0`.
        expect(block_size <= 32 and partition_size % block_size == 0, f"block_size {block_size}: <= 32, divides 256")
        # pa_kernels.cuh: `VHELOOP = HEAD_SIZE / 16 / NWARPS` with 4 warps.
        expect(dim % 64 == 0, f"head dim {dim}: a multiple of 64")
        for cache, what in ((key_cache, "key_cache"), (value_cache, "value_cache")):
            expect_tensor(cache, what, dtype=query.dtype, device_type=dev, ndim=4)
        kv_heads = key_cache.shape[2]  # pa_ragged.py: NHD takes heads from dim 2
        expect(tuple(key_cache.shape[1:]) == (block_size, kv_heads, dim), "key_cache is [pages, P, Hk, D]")
        expect(value_cache.shape == key_cache.shape, "value_cache is key_cache's shape")
        expect(heads % kv_heads == 0, "query heads are a multiple of KV heads")
        expect_tensor(out, "out", device_type=dev)
        expect(out.shape == query.shape, "out is [rows, Hq, D]")
        for t, what in (
            (kv_indptr, "kv_indptr"),
            (kv_page_indices, "kv_page_indices"),
            (kv_last_page_lens, "kv_last_page_lens"),
        ):
            expect_tensor(t, what, dtype=torch.int32, device_type=dev, ndim=1)
        # pa_ragged.py reads the scales through `data_ptr()` as float pointers.
        for t, what in ((k_scale, "k_scale"), (v_scale, "v_scale")):
            expect_tensor(t, what, dtype=torch.float32, device_type=dev)
        expect(float(k_scale) == 1.0 and float(v_scale) == 1.0, "unquantized KV has unit scales")
        expect(alibi_slopes is None and fp8_out_scale is None and mtp == 1, "no ALiBi, no fp8 output, one query")
        indptr, last = kv_indptr.tolist(), kv_last_page_lens.tolist()
        lens = [(indptr[i + 1] - indptr[i] - 1) * block_size + last[i] for i in range(rows)]
        expect(max_num_partitions >= math.ceil(max(lens) / partition_size), "too few partitions for the longest row")
        # pa_ragged.cpp.jinja: exp-sums and max-logits in float32, then partial outputs in the query's dtype.
        partials = rows * heads * max_num_partitions
        need = partials * dim * query.element_size() + 2 * partials * 4
        expect_tensor(workspace_buffer, "workspace_buffer", dtype=torch.uint8, device_type=dev)
        expect(workspace_buffer.numel() >= need, f"workspace {workspace_buffer.numel()} B < {need} B")
        recorder.record(
            "paged_attention_ragged",
            rows=rows,
            partitions=max_num_partitions,
            block_size=block_size,
            workspace_bytes=workspace_buffer.numel(),
            needed_bytes=need,
        )
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
        min_seqlen_q=0,
        dropout_p=0.0,
        softmax_scale=None,
        logits_soft_cap=0.0,
        causal=False,
        window_size=(-1, -1, 0),
        bias=None,
        alibi_slopes=None,
        deterministic=False,
        return_lse=False,
        return_attn_probs=False,
        how_v3_bf16_cvt=1,
        block_table=None,
        out=None,
        cu_seqlens_q_padded=None,
        cu_seqlens_k_padded=None,
        sink_ptr=None,
    ):
        # aiter/ops/mha.py `flash_attn_varlen_func`: the signature above, in this order.
        for t, what in ((q, "q"), (k, "k"), (v, "v")):
            expect_tensor(t, what, dtype=q.dtype, device_type=q.device.type, ndim=3)
        expect(k.shape == v.shape and q.shape[2] == k.shape[2], "k/v are [keys, Hk, D] with q's D")
        expect(q.shape[1] % k.shape[1] == 0, "the number of heads in Q must be divisible by the number in KV")
        for t, what in ((cu_seqlens_q, "cu_seqlens_q"), (cu_seqlens_k, "cu_seqlens_k")):
            expect_tensor(t, what, dtype=torch.int32, device_type=q.device.type, ndim=1)
        expect(causal and dropout_p == 0.0, "inference extend attention is causal without dropout")
        expect(block_table is None and out is None and bias is None and alibi_slopes is None, "packed K/V, no bias")
        expect(not (return_lse or return_attn_probs), "only the output comes back")
        cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
        expect(cq[-1] == q.shape[0] and ck[-1] == k.shape[0], "cu_seqlens end at the packed lengths")
        q_lens = [b - a for a, b in itertools.pairwise(cq)]
        k_lens = [b - a for a, b in itertools.pairwise(ck)]
        expect(max_seqlen_q == max(q_lens) and max_seqlen_k == max(k_lens), "max lengths match the offsets")
        expect(len(window_size) in (2, 3) and window_size[1] in (-1, 0), "nothing right of the query is visible")
        expect(len(window_size) == 2 or window_size[2] == 0, "no attention sink")
        recorder.record("flash_attn_varlen_func", window_size=tuple(window_size))
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
    mla = module("aiter.mla", mla_decode_fwd=aiter_mla_standin.build(recorder))
    ops.shuffle = shuffle
    root = module(
        "aiter",
        ops=ops,
        fused_moe=fused,
        mla=mla,
        ActivationType=ActivationType,
        rmsnorm2d_fwd=rmsnorm2d_fwd,
        rmsnorm2d_fwd_with_add=rmsnorm2d_fwd_with_add,
        paged_attention_ragged=paged_attention_ragged,
        flash_attn_varlen_func=flash_attn_varlen_func,
    )
    return {"aiter": root, "aiter.ops": ops, "aiter.ops.shuffle": shuffle, "aiter.fused_moe": fused, "aiter.mla": mla}
