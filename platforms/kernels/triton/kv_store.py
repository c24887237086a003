"""KV store scatter: the step's new keys and values into their cache slots.

The buffer keeps the reference layout `[2, num_slots, Hk, D]` (keys then values); slots are token
level, so any page size is served. A program writes `BLOCK_T` tokens, each token's `Hk * D`
values as one flat row (keys and values must be unit-strided over `(Hk, D)` jointly).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from sglang.platforms.kernels.triton.tuning import TritonTuning, resolve


@triton.jit
def _store_kv_kernel(
    K,
    V,
    Cache,
    Slots,
    num_tokens,
    row_width,
    stride_kt,
    stride_vt,
    stride_cache_kv,
    stride_cache_slot,
    BLOCK_T: tl.constexpr,
    BLOCK_W: tl.constexpr,
):
    """Tokens `t` of block `b`: `Cache[0, Slots[t]] = K[t]`, `Cache[1, Slots[t]] = V[t]`, rows of
    `row_width = Hk * D` values, cast to the cache dtype."""
    tokens = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    t_mask = tokens < num_tokens
    cols = tl.arange(0, BLOCK_W)[None, :]
    mask = t_mask[:, None] & (cols < row_width)
    slots = tl.load(Slots + tokens, mask=t_mask, other=0).to(tl.int64)
    tokens = tokens.to(tl.int64)[:, None]
    k = tl.load(K + tokens * stride_kt + cols, mask=mask).to(tl.float32)
    v = tl.load(V + tokens * stride_vt + cols, mask=mask).to(tl.float32)
    rows = Cache + slots[:, None] * stride_cache_slot + cols
    tl.store(rows, k, mask=mask)
    tl.store(rows + stride_cache_kv, v, mask=mask)


def _flat_rows(x: torch.Tensor) -> torch.Tensor:
    """`[T, Hk, D]` as `[T, Hk * D]` rows with unit stride (a view when the layout allows)."""
    if x.stride(-1) != 1 or x.stride(-2) != x.shape[-1]:
        x = x.contiguous()
    return x


def store_kv(
    kv_buffer: torch.Tensor,
    slots: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    tuning: TritonTuning | None = None,
) -> torch.Tensor:
    """Writes `k`, `v` `[T, Hk, D]` at `slots` `[T]` in place and hands back the same buffer.

    Slots are distinct, except the scratch slot a captured step's padding rows share: which of
    their writes lands there does not matter, since no real row reads it.
    """
    tuning = resolve(tuning)
    if kv_buffer.stride(-1) != 1 or kv_buffer.stride(-2) != kv_buffer.shape[-1]:
        raise ValueError("the KV buffer must be unit-strided over (heads, head dim)")
    k, v = _flat_rows(k), _flat_rows(v)
    tokens, heads, dim = k.shape
    if tokens:
        block_w = triton.next_power_of_2(heads * dim)
        block_t = min(max(tuning.store_tile // block_w, 1), triton.next_power_of_2(tokens))
        _store_kv_kernel[(triton.cdiv(tokens, block_t),)](
            k,
            v,
            kv_buffer,
            slots,
            tokens,
            heads * dim,
            k.stride(0),
            v.stride(0),
            kv_buffer.stride(0),
            kv_buffer.stride(1),
            BLOCK_T=block_t,
            BLOCK_W=block_w,
            **tuning.launch_options(),
        )
    return kv_buffer
