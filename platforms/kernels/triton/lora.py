"""Multi-adapter LoRA shrink and expand, one program per (row, block of output columns).

Each program reads its row's slot from `token_slots` and that slot's weights only, so a batch of
many adapters costs what one adapter's does. The reductions run in float32 (`tl.sum`, not
`tl.dot`: a row-times-matrix product has no tile to feed a dot) and the result rounds once.
Expand writes a new output, as the reference does.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from sglang.ops.lora import part_of_column
from sglang.platforms.kernels.triton.tuning import TritonTuning, resolve

_BLOCK_K = 64
"""Input features one shrink iteration reads."""
_BLOCK_COLUMNS = 64
"""Output columns one program writes."""


@triton.jit
def _shrink_kernel(
    X,
    A,
    Slots,
    Out,
    hidden,
    width,
    stride_x,
    stride_as,
    stride_an,
    stride_out,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    """`Out[t, n] = sum_k A[slot_t, n, k] * X[t, k]` for `n` in this program's block."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    slot = tl.load(Slots + row).to(tl.int64)
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for start in range(0, hidden, BLOCK_K):
        ks = start + tl.arange(0, BLOCK_K)
        x = tl.load(X + row * stride_x + ks, mask=ks < hidden, other=0.0).to(tl.float32)
        mask = (cols[:, None] < width) & (ks[None, :] < hidden)
        a = tl.load(A + slot * stride_as + cols[:, None] * stride_an + ks[None, :], mask=mask, other=0.0)
        acc += tl.sum(a.to(tl.float32) * x[None, :], axis=1)
    tl.store(Out + row * stride_out + cols, acc, mask=cols < width)


@triton.jit
def _expand_kernel(
    Y,
    H,
    B,
    Slots,
    Scaling,
    ColumnPart,
    Out,
    out_width,
    rank,
    stride_y,
    stride_h,
    stride_bs,
    stride_bo,
    stride_out,
    BLOCK_O: tl.constexpr,
    BLOCK_R: tl.constexpr,
):
    """`Out[t, o] = Y[t, o] + Scaling[s] * sum_r H[t, part(o) * rank + r] * B[s, o, r]`."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_O + tl.arange(0, BLOCK_O)
    ranks = tl.arange(0, BLOCK_R)
    col_mask = cols < out_width
    mask = col_mask[:, None] & (ranks[None, :] < rank)
    slot = tl.load(Slots + row).to(tl.int64)
    scale = tl.load(Scaling + slot).to(tl.float32)
    part = tl.load(ColumnPart + cols, mask=col_mask, other=0).to(tl.int64)
    h = tl.load(H + row * stride_h + part[:, None] * rank + ranks[None, :], mask=mask, other=0.0)
    b = tl.load(B + slot * stride_bs + cols[:, None] * stride_bo + ranks[None, :], mask=mask, other=0.0)
    delta = tl.sum(h.to(tl.float32) * b.to(tl.float32), axis=1)
    y = tl.load(Y + row * stride_y + cols, mask=col_mask, other=0.0).to(tl.float32)
    tl.store(Out + row * stride_out + cols, y + scale * delta, mask=col_mask)


def _unit_rows(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


def lora_shrink(
    x: torch.Tensor, a: torch.Tensor, token_slots: torch.Tensor, *, tuning: TritonTuning | None = None
) -> torch.Tensor:
    x, a = _unit_rows(x), _unit_rows(a)
    width = a.shape[1]
    out = torch.empty(x.shape[0], width, dtype=x.dtype, device=x.device)
    if x.shape[0] and width:
        block = min(_BLOCK_COLUMNS, triton.next_power_of_2(width))
        grid = (x.shape[0], triton.cdiv(width, block))
        _shrink_kernel[grid](
            x,
            a,
            token_slots,
            out,
            x.shape[1],
            width,
            x.stride(0),
            a.stride(0),
            a.stride(1),
            out.stride(0),
            BLOCK_N=block,
            BLOCK_K=_BLOCK_K,
            **resolve(tuning).launch_options(),
        )
    return out


def lora_expand(
    y: torch.Tensor,
    h: torch.Tensor,
    b: torch.Tensor,
    token_slots: torch.Tensor,
    scaling: torch.Tensor,
    out_widths: tuple[int, ...],
    *,
    tuning: TritonTuning | None = None,
) -> torch.Tensor:
    y, h, b = _unit_rows(y), _unit_rows(h), _unit_rows(b)
    out_width, rank = b.shape[1], b.shape[2]
    out = torch.empty_like(y)
    if y.shape[0] and out_width:
        block = min(_BLOCK_COLUMNS, triton.next_power_of_2(out_width))
        grid = (y.shape[0], triton.cdiv(out_width, block))
        _expand_kernel[grid](
            y,
            h,
            b,
            token_slots,
            scaling,
            part_of_column(out_widths, y.device).to(torch.int32),
            out,
            out_width,
            rank,
            y.stride(0),
            h.stride(0),
            b.stride(0),
            b.stride(1),
            out.stride(0),
            BLOCK_O=block,
            BLOCK_R=triton.next_power_of_2(rank),
            **resolve(tuning).launch_options(),
        )
    return out
