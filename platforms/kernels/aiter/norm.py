"""RMSNorm through AITER's `rmsnorm2d_fwd` and `rmsnorm2d_fwd_with_add` (2-D `[rows, hidden]`)."""

from __future__ import annotations

import aiter
import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    rows = x.reshape(-1, x.shape[-1]).contiguous()
    return aiter.rmsnorm2d_fwd(rows, weight, eps).view(x.shape)


def fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """The fused kernel writes `norm(x + residual)` and `x + residual` into the outputs it is given."""
    rows = x.reshape(-1, x.shape[-1]).contiguous()
    out, summed = torch.empty_like(rows), torch.empty_like(rows)
    aiter.rmsnorm2d_fwd_with_add(out, rows, residual.reshape(rows.shape).contiguous(), summed, weight, eps)
    return out.view(x.shape), summed.view(x.shape)
