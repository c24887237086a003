"""Rotary position embedding applied from the model's cos/sin table, one program per token.

Every scaling variant (linear, dynamic NTK, llama3, ...) lives in the table the model built, so
the kernel only indexes it: `cos_sin[p]` is `[cos(p f_0..f_{R/2-1}) | sin(...)]` for rotary dim
`R <= D`; dims `R..D` pass through unchanged.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from sglang.platforms.kernels.triton.tuning import TritonTuning, resolve


@triton.jit
def _rotary_kernel(
    X,
    Out,
    Positions,
    CosSin,
    num_heads,
    head_dim,
    half_rot,
    stride_xt,
    stride_xh,
    stride_ot,
    stride_oh,
    stride_table,
    IS_NEOX: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """Token `t` at position `p`: each pair `(x1, x2)` of every head becomes
    `(x1 cos - x2 sin, x2 cos + x1 sin)` with frequency `i`. Pairs are `(i, i + R/2)` (neox) or
    `(2i, 2i + 1)` (GPT-J); `Out` dims at or past `R = 2 * half_rot` copy `X`."""
    token = tl.program_id(0).to(tl.int64)
    pos = tl.load(Positions + token).to(tl.int64)
    heads = tl.arange(0, BLOCK_H)[:, None]
    freq = tl.arange(0, BLOCK_R)[None, :]
    fmask = freq < half_rot
    cos = tl.load(CosSin + pos * stride_table + freq, mask=fmask, other=0.0).to(tl.float32)
    sin = tl.load(CosSin + pos * stride_table + half_rot + freq, mask=fmask, other=0.0).to(tl.float32)
    if IS_NEOX:
        first, second = freq, freq + half_rot
    else:
        first, second = 2 * freq, 2 * freq + 1
    mask = (heads < num_heads) & fmask
    x_row = X + token * stride_xt + heads * stride_xh
    o_row = Out + token * stride_ot + heads * stride_oh
    x1 = tl.load(x_row + first, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(x_row + second, mask=mask, other=0.0).to(tl.float32)
    tl.store(o_row + first, x1 * cos - x2 * sin, mask=mask)
    tl.store(o_row + second, x2 * cos + x1 * sin, mask=mask)
    rest = 2 * half_rot + tl.arange(0, BLOCK_D)[None, :]
    rest_mask = (heads < num_heads) & (rest < head_dim)
    tl.store(o_row + rest, tl.load(x_row + rest, mask=rest_mask).to(tl.float32), mask=rest_mask)


def _rotate(
    x: torch.Tensor, positions: torch.Tensor, cos_sin: torch.Tensor, is_neox: bool, tuning: TritonTuning
) -> torch.Tensor:
    if x.stride(-1) != 1:
        x = x.contiguous()
    tokens, heads, dim = x.shape
    half_rot = cos_sin.shape[-1] // 2
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if tokens:
        _rotary_kernel[(tokens,)](
            x,
            out,
            positions,
            cos_sin,
            heads,
            dim,
            half_rot,
            x.stride(0),
            x.stride(1),
            out.stride(0),
            out.stride(1),
            cos_sin.stride(0),
            IS_NEOX=is_neox,
            BLOCK_H=triton.next_power_of_2(heads),
            BLOCK_R=triton.next_power_of_2(half_rot),
            BLOCK_D=triton.next_power_of_2(max(dim - 2 * half_rot, 1)),
            **tuning.launch_options(),
        )
    return out


def apply_rotary(
    positions: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    cos_sin: torch.Tensor,
    is_neox: bool = True,
    *,
    tuning: TritonTuning | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotates `q` `[T, Hq, D]` and `k` `[T, Hk, D]` by `positions` `[T]`; new tensors, inputs' dtype."""
    tuning = resolve(tuning)
    cos_sin = cos_sin if cos_sin.stride(-1) == 1 else cos_sin.contiguous()
    return _rotate(q, positions, cos_sin, is_neox, tuning), _rotate(k, positions, cos_sin, is_neox, tuning)
