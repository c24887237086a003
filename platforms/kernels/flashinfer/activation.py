"""SiLU-and-mul through `flashinfer.activation` (input `[..., 2 * d]` as `[gate | up]`)."""

from __future__ import annotations

import flashinfer
import torch


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    return flashinfer.activation.silu_and_mul(x.contiguous())
