"""A recording stand-in of `intel_extension_for_pytorch` as its GPU build behaves (IPEX 2.8):
`llm.functional.{rms_norm, silu_mul, varlen_attention}`, `llm.modules.PagedAttention.
{reshape_and_cache, single_query_kv_attention}` and `xpu.has_2d_block_array`, computing with
our references.

Where the rules come from: intel/intel-extension-for-pytorch at tag v2.8.10+xpu (commit
09505bb158cd953896616a36bdefc0250365a63b); the repository's default branch holds only the CPU
build. Each check names its source:
- the Python entry points and their parameter order: intel_extension_for_pytorch/llm/modules/
  mha_fusion.py (`PagedAttention`), llm/functional/fusions.py (`varlen_attention`, `rms_norm`,
  `silu_mul`), and their GPU bodies in transformers/models/xpu/fusions/mha_fusion.py
  (`_IPEXPagedAttentionXPU`, `_IPEXVarlenScaledDotProductXPU`) and activation_fusion.py;
- `reshape_and_cache`: csrc/gpu/aten/operators/CacheOps.cpp (key cache
  `[blocks, Hk, D / x, P, x]` with `x = key_cache.size(4)`, value cache `[blocks, Hk, D, P]`,
  int32 or int64 slots, fp16/bf16/fp32 values);
- the decode kernel: csrc/gpu/aten/operators/transformers/attention.cpp `paged_attention`
  (contexts over 512 take the split v2 kernel; v1 receives no soft-cap), and the XeTLA kernels
  csrc/gpu/aten/operators/xetla/kernels/SDP/paged_attention_v1.cpp and _v2.cpp (blocks of 16
  or 32, head dims in tiers up to 256, fp16/bf16, int32 block tables and context lengths),
  paged_attention_kernel.hpp (both caches `[num_blocks, num_kv_heads, head_size, block_size]`);
- varlen: attention.cpp `varlen_fwd` (int32 contiguous offsets, contiguous q/k/v/out, a
  left window at least `max_seqlen_k` means none) and fmha_forward.hpp (the causal mask aligned
  bottom-right: `seqlen_diff`); the XeTLA kernel is fp16/bf16. Without 2D block loads the
  Python body calls `torch.xpu.varlen_fwd`, which takes neither window nor soft-cap.
Our adapter uses `silu_mul` rather than `silu_and_mul`: the GPU `silu_and_mul_xpu` computes
its output width as `x.size(-1) / 2`, a float, when it allocates the output.

Layouts are the GPU kernels': `reshape_and_cache` writes keys as `[blocks, Hk, D / x, P, x]` and
values as `[blocks, Hk, D, P]` (the stand-in writes element by element where the kernel does),
and the decode kernel reads both halves as `[blocks, Hk, D, P]`, so a cache written with any
`x` but 1 reads back scrambled. Two quirks of the real kernels are reproduced, because an adapter
that relied on the missing feature would compute wrong results on the device: the decode
kernel's single-pass form (contexts up to 512) ignores the soft-cap, and without 2D block loads
(`has_2d_block_array=False`) varlen attention ignores the window and the soft-cap.
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F

from sglang.ops.norm import rms_norm as reference_rms_norm

from .standin import Recorder, expect, expect_tensor, layer_from, module, reference_attention, token_slots

DECODE_BLOCK_SIZES = (16, 32)
"""Blocks the decode kernel is compiled for."""
MAX_HEAD_DIM = 256
SINGLE_PASS_CONTEXT = 512
"""Contexts up to this length run the kernel's single-pass form, which drops the soft-cap."""
INDEX_DTYPES = (torch.int32, torch.int64)
KERNEL_DTYPES = (torch.float16, torch.bfloat16)
"""What the XeTLA decode and varlen kernels dispatch (paged_attention_v1.cpp, varlen_fwd)."""


def serves(candidate, case, args) -> bool:
    """IPEX's decode kernel takes blocks of 16 or 32 tokens: page size 1 is never handed to it."""
    return case.page_size in (None, *DECODE_BLOCK_SIZES)


def _expect_offsets(t: object, what: str, device_type: str, total: int) -> list[int]:
    """A cumulative-length tensor: int32, 1-D, on the device, rising from 0 to `total`."""
    expect_tensor(t, what, dtype=torch.int32, device_type=device_type, ndim=1)
    values = t.tolist()
    expect(values[0] == 0 and all(b >= a for a, b in itertools.pairwise(values)), f"{what} must rise from 0")
    expect(values[-1] == total, f"{what}[-1] is {values[-1]}, the packed tensor has {total} rows")
    return values


def build(recorder: Recorder, has_2d_block_array: bool = True) -> dict:
    """`has_2d_block_array`: what `ipex.xpu.has_2d_block_array()` reports (False: Arc A-series)."""

    def rms_norm(hidden_states, weight, eps):
        recorder.record("llm.functional.rms_norm", eps=eps)
        return reference_rms_norm(hidden_states, weight, eps)

    def silu_mul(x, y, out=None):
        expect(x.shape == y.shape and x.is_contiguous() and y.is_contiguous(), "gate and up: same shape, contiguous")
        recorder.record("llm.functional.silu_mul")
        return F.silu(x) * y

    def varlen_attention(
        query,
        key,
        value,
        out,
        seqlen_q,
        seqlen_k,
        alibi_slopes,
        max_seqlen_q,
        max_seqlen_k,
        pdropout,
        softmax_scale,
        zero_tensors,
        is_causal,
        return_softmax,
        gen_,
        window_size_left=-1,
        window_size_right=-1,
        softcap=-1.0,
    ):
        expect(query.dtype in KERNEL_DTYPES, f"query: dtype {query.dtype}, the XeTLA kernel takes fp16/bf16")
        for t, what in ((query, "query"), (key, "key"), (value, "value")):
            expect_tensor(t, what, dtype=query.dtype, device_type=query.device.type, ndim=3)
            expect(t.is_contiguous(), f"{what} must be contiguous")
        expect(key.shape == value.shape and query.shape[2] == key.shape[2], "key/value are [keys, Hk, D]")
        expect(query.shape[1] % key.shape[1] == 0, "query heads are a multiple of KV heads")
        expect_tensor(out, "out", dtype=query.dtype, device_type=query.device.type)
        expect(out.shape == query.shape and out.is_contiguous(), "out is a contiguous buffer shaped like query")
        cq = _expect_offsets(seqlen_q, "seqlen_q", query.device.type, query.shape[0])
        ck = _expect_offsets(seqlen_k, "seqlen_k", query.device.type, key.shape[0])
        expect(len(cq) == len(ck), "one query and one key range per sequence")
        q_lens = [b - a for a, b in itertools.pairwise(cq)]
        k_lens = [b - a for a, b in itertools.pairwise(ck)]
        expect(max_seqlen_q == max(q_lens) and max_seqlen_k == max(k_lens), "max lengths match the offsets")
        expect(all(q <= k for q, k in zip(q_lens, k_lens)), "a sequence's queries are among its keys")
        expect(alibi_slopes is None and gen_ is None, "no ALiBi, no dropout generator")
        expect(pdropout == 0.0 and not zero_tensors and not return_softmax, "inference: no dropout, no softmax out")
        expect(is_causal is True, "extend attention is causal")
        expect(isinstance(softmax_scale, float), "softmax_scale is passed explicitly")
        expect(window_size_right in (-1, 0), "nothing right of the query is visible")
        expect(softcap == -1.0 or softcap > 0, f"softcap {softcap}: positive, or -1 for none")
        recorder.record(
            "llm.functional.varlen_attention",
            q_offsets=cq,
            k_offsets=ck,
            window=(window_size_left, window_size_right),
            softcap=softcap,
        )
        window = window_size_left + 1 if window_size_left >= 0 and has_2d_block_array else None
        cap = softcap if softcap > 0 and has_2d_block_array else None
        slots = [torch.arange(a, b) for a, b in itertools.pairwise(ck)]
        layer = layer_from(softmax_scale, window, cap)
        out.copy_(reference_attention(query, torch.stack([key, value]), k_lens, q_lens, slots, layer))
        return out

    class PagedAttention:
        @staticmethod
        def reshape_and_cache(
            key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype="auto", k_scale=1.0, v_scale=1.0
        ):
            tokens, heads, dim = expect_tensor(key, "key", ndim=3).shape
            expect(key.is_contiguous() and value.is_contiguous(), "key/value must be contiguous")
            expect(value.shape == key.shape and value.dtype == key.dtype, "key/value are [tokens, Hk, D] alike")
            expect_tensor(key_cache, "key_cache", dtype=key.dtype, device_type=key.device.type, ndim=5)
            expect_tensor(value_cache, "value_cache", dtype=key.dtype, device_type=key.device.type, ndim=4)
            blocks, _, _, block_size, x = key_cache.shape
            key_layout = dim % x == 0 and tuple(key_cache.shape[1:3]) == (heads, dim // x)
            expect(key_layout, "key_cache is [blocks, Hk, D / x, P, x]")
            expect(tuple(value_cache.shape) == (blocks, heads, dim, block_size), "value_cache is [blocks, Hk, D, P]")
            expect(key_cache.is_contiguous() and value_cache.is_contiguous(), "caches written in place")
            expect_tensor(slot_mapping, "slot_mapping", device_type=key.device.type, ndim=1)
            expect(slot_mapping.dtype in INDEX_DTYPES and slot_mapping.numel() == tokens, "one int slot per token")
            expect(kv_cache_dtype == "auto" and k_scale == 1.0 and v_scale == 1.0, "unquantized KV in the model dtype")
            slots = slot_mapping.long()
            expect(bool((slots < blocks * block_size).all()), "a slot lies outside the cache")
            recorder.record(
                "PagedAttention.reshape_and_cache", slots=slots.tolist(), x=x, block_size=block_size, tokens=tokens
            )
            block, offset = slots // block_size, slots % block_size
            key_cache[block, :, :, offset, :] = key.view(tokens, heads, dim // x, x)
            value_cache[block, :, :, offset] = value

        @staticmethod
        def single_query_kv_attention(
            output,
            query,
            key_cache,
            value_cache,
            num_queries_per_tokens,
            scale,
            block_tables,
            context_lens,
            block_size,
            max_context_len,
            alibi_slopes,
            softcap=-1.0,
        ):
            dev = query.device.type
            rows, heads, dim = expect_tensor(query, "query", ndim=3).shape
            expect(query.dtype in KERNEL_DTYPES, f"query: dtype {query.dtype}, the XeTLA kernel takes fp16/bf16")
            expect(query.is_contiguous(), "query must be contiguous")
            expect_tensor(output, "output", dtype=query.dtype, device_type=dev)
            expect(output.shape == query.shape, "output is [rows, Hq, D]")
            expect(block_size in DECODE_BLOCK_SIZES, f"block_size {block_size}: the kernel has 16 and 32")
            expect(dim <= MAX_HEAD_DIM, f"head dim {dim} > {MAX_HEAD_DIM}")
            for cache, what in ((key_cache, "key_cache"), (value_cache, "value_cache")):
                expect_tensor(cache, what, dtype=query.dtype, device_type=dev, ndim=4)
                expect(cache.shape[2:] == (dim, block_size), f"{what} is [blocks, Hk, D, P]")
            kv_heads = key_cache.shape[1]
            expect(value_cache.shape == key_cache.shape, "key and value caches alike")
            expect(
                isinstance(num_queries_per_tokens, int) and num_queries_per_tokens * kv_heads == heads,
                "num_queries_per_tokens is the int Hq // Hk",
            )
            expect(isinstance(scale, float), "scale is a float")
            expect_tensor(block_tables, "block_tables", dtype=torch.int32, device_type=dev, ndim=2)
            expect_tensor(context_lens, "context_lens", dtype=torch.int32, device_type=dev, ndim=1)
            expect(block_tables.is_contiguous() and block_tables.shape[0] == rows, "one block-table row per query")
            lens = context_lens.tolist()
            expect(len(lens) == rows and min(lens) >= 1, "one context length (>= 1) per query")
            expect(isinstance(max_context_len, int) and max_context_len == max(lens), "max_context_len is the longest")
            expect(block_tables.shape[1] * block_size >= max_context_len, "the block table is too narrow")
            expect(alibi_slopes is None, "no ALiBi")
            recorder.record(
                "PagedAttention.single_query_kv_attention",
                block_tables=block_tables.clone(),
                context_lens=lens,
                max_context_len=max_context_len,
                num_queries_per_tokens=num_queries_per_tokens,
                softcap=softcap,
            )
            blocks = [block_tables[r, : -(-lens[r] // block_size)] for r in range(rows)]
            slots = [token_slots(b, block_size, n) for b, n in zip(blocks, lens)]
            # Both halves [blocks, Hk, D, P] as token-major [blocks * P, Hk, D].
            tokens = [c.permute(0, 3, 1, 2).reshape(-1, kv_heads, dim) for c in (key_cache, value_cache)]
            cap = softcap if softcap > 0 and max_context_len > SINGLE_PASS_CONTEXT else None
            layer = layer_from(scale, None, cap)
            output.copy_(reference_attention(query, torch.stack(tokens), lens, [1] * rows, slots, layer))
            return output

    functional = module(
        "intel_extension_for_pytorch.llm.functional",
        rms_norm=rms_norm,
        silu_mul=silu_mul,
        varlen_attention=varlen_attention,
    )
    modules = module("intel_extension_for_pytorch.llm.modules", PagedAttention=PagedAttention)
    llm = module("intel_extension_for_pytorch.llm", functional=functional, modules=modules)
    xpu = module("intel_extension_for_pytorch.xpu", has_2d_block_array=lambda device=0: has_2d_block_array)
    root = module("intel_extension_for_pytorch", llm=llm, xpu=xpu)
    return {
        "intel_extension_for_pytorch": root,
        "intel_extension_for_pytorch.llm": llm,
        "intel_extension_for_pytorch.llm.functional": functional,
        "intel_extension_for_pytorch.llm.modules": modules,
        "intel_extension_for_pytorch.xpu": xpu,
    }
