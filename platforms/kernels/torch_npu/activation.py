"""SiLU-and-mul through `torch_npu.npu_swiglu`: SiLU of the first half times the second half of
the last dimension, which is our `[gate | up]` layout. The operator takes no non-contiguous
input (its API page), while our op takes any view, so the input is made contiguous (a no-op for
the usual freshly computed projection)."""

from __future__ import annotations

import torch
import torch_npu


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    return torch_npu.npu_swiglu(x.contiguous(), dim=-1)
