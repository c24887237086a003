"""RMS normalization, plain and fused with the residual add, one program per row.

Rounding follows the reference (Hugging Face's Llama norm): the sum `x + residual` is rounded to
its dtype before it is normalized, and the normalized row is rounded to the input dtype before
the weight multiplies it, so fp16/bf16 results match the reference's to the last bit or one.
A row is read whole (`BLOCK = next_power_of_2(hidden)`), so the mean needs one pass.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from sglang.platforms.kernels.triton.tuning import TritonTuning, resolve


@triton.jit
def _rms_norm_kernel(
    X,
    Residual,
    Weight,
    Out,
    Summed,
    hidden,
    eps,
    stride_x,
    stride_r,
    stride_out,
    stride_sum,
    HAS_RESIDUAL: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Row `r`: with HAS_RESIDUAL, `Summed[r] = X[r] + Residual[r]` and `Out[r] = norm(Summed[r])`;
    otherwise `Out[r] = norm(X[r])`. Rows are `hidden` wide and unit-strided."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < hidden
    x = tl.load(X + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    if HAS_RESIDUAL:
        residual = tl.load(Residual + row * stride_r + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(Summed + row * stride_sum + cols, x + residual, mask=mask)
        # Normalize the sum as stored (rounded to its dtype), as the reference does.
        x = (x + residual).to(Summed.dtype.element_ty).to(tl.float32)
        normed_dtype = Summed.dtype.element_ty
    else:
        normed_dtype = X.dtype.element_ty
    inv_rms = tl.rsqrt(tl.sum(x * x, axis=0) / hidden + eps)
    normed = (x * inv_rms).to(normed_dtype).to(tl.float32)
    weight = tl.load(Weight + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(Out + row * stride_out + cols, normed * weight, mask=mask)


def _rows(x: torch.Tensor) -> torch.Tensor:
    """`x` as `[rows, hidden]` with unit stride along the row (a view when possible)."""
    rows = x.reshape(-1, x.shape[-1])
    return rows if rows.stride(-1) == 1 else rows.contiguous()


def _launch(
    x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float, tuning: TritonTuning | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    tuning = resolve(tuning)
    hidden = x.shape[-1]
    rows = _rows(x)
    summed = res_rows = None
    normed_dtype = x.dtype
    if residual is not None:
        res_rows = _rows(residual)
        normed_dtype = torch.promote_types(x.dtype, residual.dtype)
        summed = torch.empty(rows.shape, dtype=normed_dtype, device=x.device)
    out = torch.empty(rows.shape, dtype=torch.promote_types(normed_dtype, weight.dtype), device=x.device)
    if rows.shape[0]:
        _rms_norm_kernel[(rows.shape[0],)](
            rows,
            res_rows if res_rows is not None else rows,
            weight.contiguous(),
            out,
            summed if summed is not None else out,
            hidden,
            eps,
            rows.stride(0),
            res_rows.stride(0) if res_rows is not None else 0,
            out.stride(0),
            summed.stride(0) if summed is not None else 0,
            HAS_RESIDUAL=residual is not None,
            BLOCK=triton.next_power_of_2(hidden),
            **tuning.launch_options(),
        )
    shape = x.shape
    return out.reshape(shape), summed.reshape(shape) if summed is not None else None


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, *, tuning: TritonTuning | None = None) -> torch.Tensor:
    """`x * rsqrt(mean(x^2) + eps) * weight` over the last dimension of `x` `[..., hidden]`."""
    return _launch(x, None, weight, eps, tuning)[0]


def fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float, *, tuning: TritonTuning | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """`(rms_norm(x + residual), x + residual)`; the sum is the next layer's residual."""
    out, summed = _launch(x, residual, weight, eps, tuning)
    return out, summed
