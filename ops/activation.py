"""Gated activations: the input's last dimension is `[gate | up]`, the output is half as wide."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    gate, up = x.chunk(2, dim=-1)
    return F.silu(gate) * up


def gelu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """GeGLU with the tanh approximation (`gelu_pytorch_tanh`, as Gemma-style MLPs use)."""
    gate, up = x.chunk(2, dim=-1)
    return F.gelu(gate, approximate="tanh") * up


GATED_ACTIVATIONS = {"silu": "silu_and_mul", "gelu_pytorch_tanh": "gelu_and_mul"}
"""Maps a config's `hidden_act` to the op that implements its gated form."""
