"""RMSNorm as a module; with a residual it fuses the add and returns the new residual too."""

from __future__ import annotations

import torch
from torch import nn

from sglang import ops
from sglang.runtime.layers.module import Module


class RMSNorm(Module):
    """`unit_offset` is Gemma's form: the checkpoint stores `w` and the norm scales by `1 + w`
    (zero-initialized weights mean identity). The weight stays as stored, so loading and tensor
    parallelism see the checkpoint's tensor; the offset is added per call (one small add)."""

    def __init__(self, size: int, eps: float, dtype: torch.dtype, unit_offset: bool = False) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size, dtype=dtype), requires_grad=False)
        self.eps = eps
        self.unit_offset = unit_offset

    def forward(
        self, x: torch.Tensor, residual: torch.Tensor | None = None
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        weight = self.weight + 1.0 if self.unit_offset else self.weight
        if residual is None:
            return ops.rms_norm(x, weight, self.eps)
        return ops.fused_add_rms_norm(x, residual, weight, self.eps)
