"""RMSNorm through `flashinfer.norm`. Its fused form works in place (`residual += x`, then
`x = norm(residual)`); the op's contract is functional, so both inputs are copied first."""

from __future__ import annotations

import flashinfer
import torch


def _rows(x: torch.Tensor) -> torch.Tensor:
    """FlashInfer's norms take `[rows, hidden]`, contiguous."""
    return x.reshape(-1, x.shape[-1]).contiguous()


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return flashinfer.norm.rmsnorm(_rows(x), weight, eps=eps).view(x.shape)


def fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    normed, summed = _rows(x).clone(), _rows(residual).clone()
    flashinfer.norm.fused_add_rmsnorm(normed, summed, weight, eps=eps)
    return normed.view(x.shape), summed.view(x.shape)
