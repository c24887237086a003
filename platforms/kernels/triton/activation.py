"""Gated activations: `x[..., :I]` is the gate, `x[..., I:]` the up projection; output `[..., I]`.

The whole computation runs in float32 and rounds once to the input dtype.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from sglang.platforms.kernels.triton.jit_math import gated
from sglang.platforms.kernels.triton.tuning import TritonTuning, resolve


@triton.jit
def _gated_kernel(X, Out, width, stride_x, stride_out, ACTIVATION: tl.constexpr, BLOCK: tl.constexpr):
    """Program (row, column block): `Out[row, cols] = act(X[row, cols]) * X[row, width + cols]`."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < width
    gate = tl.load(X + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(X + row * stride_x + width + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(Out + row * stride_out + cols, gated(gate, up, ACTIVATION), mask=mask)


def _gated_and_mul(x: torch.Tensor, activation: str, tuning: TritonTuning | None) -> torch.Tensor:
    tuning = resolve(tuning)
    width = x.shape[-1] // 2
    rows = x.reshape(-1, x.shape[-1])
    if rows.stride(-1) != 1:
        rows = rows.contiguous()
    out = torch.empty(rows.shape[0], width, dtype=x.dtype, device=x.device)
    if rows.shape[0] and width:
        block = min(tuning.elementwise_block, triton.next_power_of_2(width))
        grid = (rows.shape[0], triton.cdiv(width, block))
        _gated_kernel[grid](
            rows,
            out,
            width,
            rows.stride(0),
            out.stride(0),
            ACTIVATION=activation,
            BLOCK=block,
            **tuning.launch_options(),
        )
    return out.reshape(*x.shape[:-1], width)


def silu_and_mul(x: torch.Tensor, *, tuning: TritonTuning | None = None) -> torch.Tensor:
    return _gated_and_mul(x, "silu", tuning)


def gelu_and_mul(x: torch.Tensor, *, tuning: TritonTuning | None = None) -> torch.Tensor:
    """GeGLU with the tanh approximation, as the reference."""
    return _gated_and_mul(x, "gelu_tanh", tuning)
