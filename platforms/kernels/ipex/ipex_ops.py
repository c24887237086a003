"""RMSNorm and SiLU-and-mul through `intel_extension_for_pytorch.llm.functional`."""

from __future__ import annotations

import intel_extension_for_pytorch as ipex
import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return ipex.llm.functional.rms_norm(x, weight, eps)


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """IPEX takes the gate and the up halves as two tensors."""
    gate, up = x.chunk(2, dim=-1)
    return ipex.llm.functional.silu_mul(gate.contiguous(), up.contiguous())
