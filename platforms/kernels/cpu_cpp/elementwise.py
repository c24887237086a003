"""The cpu_cpp family's float32 norm, rotary and activation ops: one C++ loop each.

At decode these ops touch a few hundred values each, and their torch forms are chains of
dispatched ops, each paying the dispatcher (`benchmarks/README.md`, "Measured costs"); the
kernels compute the same float32 arithmetic in the references' order, so they match them to
rounding.
"""

from __future__ import annotations

import torch

from sglang.platforms.kernels.cpu_cpp.build import ensure_built, kernel_ops

ensure_built()


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return kernel_ops().rms_norm(x, weight, eps)


def fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    return kernel_ops().fused_add_rms_norm(x, residual, weight, eps)


def apply_rotary(
    positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, cos_sin: torch.Tensor, is_neox: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    return kernel_ops().apply_rotary(positions, q, k, cos_sin, is_neox)


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    return kernel_ops().silu_and_mul(x)
