"""Fused MoE experts through `aiter.fused_moe.fused_moe`.

AITER's MoE kernels read expert weights in a shuffled tile layout (`shuffle_weight`, 16x16
tiles). The op receives the model's weights on every call, so each weight tensor is shuffled
once, on first use, and the shuffled copy is kept for as long as the weight lives. AITER's
gated activation is SiLU here; other activations take the reference.
"""

from __future__ import annotations

import weakref

import torch
from aiter import ActivationType
from aiter.fused_moe import fused_moe
from aiter.ops.shuffle import shuffle_weight

from sglang.ops.moe import moe_experts as reference_moe_experts

_SHUFFLED: weakref.WeakKeyDictionary[torch.Tensor, torch.Tensor] = weakref.WeakKeyDictionary()


def shuffled(weight: torch.Tensor) -> torch.Tensor:
    """`weight` in AITER's 16x16 tile layout, computed once per weight tensor."""
    cached = _SHUFFLED.get(weight)
    if cached is None:
        cached = _SHUFFLED[weight] = shuffle_weight(weight, layout=(16, 16))
    return cached


def moe_experts(
    x: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    weights: torch.Tensor,
    expert_ids: torch.Tensor,
    activation_name: str = "silu",
) -> torch.Tensor:
    if activation_name != "silu":
        return reference_moe_experts(x, w13, w2, weights, expert_ids, activation_name)
    return fused_moe(
        x.contiguous(),
        shuffled(w13),
        shuffled(w2),
        weights.to(torch.float32),
        expert_ids.to(torch.int32),
        activation=ActivationType.Silu,
    )
