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


SWIGLU_ALPHA = 1.702
SWIGLU_LIMIT = 7.0


def clamped_swiglu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """gpt-oss's SwiGLU: gate clamped above and up on both sides at `SWIGLU_LIMIT`, then
    `gate * sigmoid(SWIGLU_ALPHA * gate) * (up + 1)` (transformers' `GptOssExperts`)."""
    gate, up = x.chunk(2, dim=-1)
    gate = gate.clamp(max=SWIGLU_LIMIT)
    up = up.clamp(min=-SWIGLU_LIMIT, max=SWIGLU_LIMIT)
    return gate * torch.sigmoid(gate * SWIGLU_ALPHA) * (up + 1)


GATED_ACTIVATIONS = {"silu": "silu_and_mul", "gelu_pytorch_tanh": "gelu_and_mul", "swigluoai": "clamped_swiglu_and_mul"}
"""Maps a config's `hidden_act` to the op that implements its gated form."""
