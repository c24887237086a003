"""RMSNorm through `torch_npu.npu_rms_norm` and `npu_add_rms_norm` (each also returns the
reciprocal RMS, unused here; the fused form returns the sum as its third output)."""

from __future__ import annotations

import torch
import torch_npu


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    normed, _ = torch_npu.npu_rms_norm(x, weight, epsilon=eps)
    return normed


def fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    normed, _, summed = torch_npu.npu_add_rms_norm(x, residual, weight, epsilon=eps)
    return normed, summed
