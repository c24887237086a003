"""Fused MoE experts through `aiter.fused_moe.fused_moe`.

AITER's MoE kernels read expert weights in a shuffled tile layout (`aiter.ops.shuffle
.shuffle_weight`, 16x16 tiles), which `fused_moe` recognises by the `is_shuffled` attribute
`shuffle_weight` sets on its result (aiter/fused_moe.py reads it off w1 and w2). Each expert
weight is shuffled once, in place: the weight tensor itself then holds AITER's layout and
carries the mark, so no second copy of the experts is kept and no lookup compares tensors. The
runtime primes every MoE layer at load (`prime_moe_layers`), so the shuffle happens before the
KV pool is sized from free memory, not at the first request.

`shuffle_weight` asserts rows a multiple of 16 and columns a multiple of 32 (its 16x16 layout
reads two 16-wide K tiles); experts of other shapes, and gated activations other than SiLU,
take the reference, and never get shuffled.
"""

from __future__ import annotations

import torch
from aiter import ActivationType
from aiter.fused_moe import fused_moe
from aiter.ops.shuffle import shuffle_weight

from sglang.ops.moe import moe_experts as reference_moe_experts

TILE_ROWS, TILE_COLS = 16, 32
"""`shuffle_weight(layout=(16, 16))`'s shape rule: rows % 16 == 0, columns % 32 == 0."""


def tileable(weight: torch.Tensor) -> bool:
    return weight.shape[-2] % TILE_ROWS == 0 and weight.shape[-1] % TILE_COLS == 0


def shuffle_in_place(weight: torch.Tensor) -> torch.Tensor:
    """`weight`, rewritten once into AITER's tile layout and marked `is_shuffled`."""
    if not getattr(weight, "is_shuffled", False):
        weight.copy_(shuffle_weight(weight, layout=(16, 16)))
        weight.is_shuffled = True
    return weight


def moe_experts(
    x: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    weights: torch.Tensor,
    expert_ids: torch.Tensor,
    activation_name: str = "silu",
) -> torch.Tensor:
    if activation_name != "silu" or not (tileable(w13) and tileable(w2)):
        return reference_moe_experts(x, w13, w2, weights, expert_ids, activation_name)
    return fused_moe(
        x.contiguous(),
        shuffle_in_place(w13),
        shuffle_in_place(w2),
        weights.to(torch.float32),
        expert_ids.to(torch.int32),
        activation=ActivationType.Silu,
    )
