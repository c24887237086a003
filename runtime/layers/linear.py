"""Linear layers whose weights are filled from checkpoints, including fused projections.

A module may declare `checkpoint_shards()`: checkpoint tensor names (relative to the module's
parent) mapped to the parameter (relative to the parent) and the index of the slice they fill.
The weight loader uses this to stack `q_proj`/`k_proj`/`v_proj` into one `qkv_proj` and so on.
"""

from __future__ import annotations

import torch
from torch import nn

from sglang import ops
from sglang.runtime.layers.module import Module

Shards = dict[str, tuple[str, tuple[slice | int, ...]]]


def empty_parameter(*shape: int, dtype: torch.dtype) -> nn.Parameter:
    """Uninitialized: every parameter is overwritten by the loader, which checks it was."""
    return nn.Parameter(torch.empty(*shape, dtype=dtype), requires_grad=False)


class Linear(Module):
    def __init__(self, in_features: int, out_features: int, bias: bool, dtype: torch.dtype) -> None:
        super().__init__()
        self.weight = empty_parameter(out_features, in_features, dtype=dtype)
        self.bias = empty_parameter(out_features, dtype=dtype) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ops.linear(x, self.weight, self.bias)


class MergedLinear(Linear):
    """Several projections of the same input computed as one matmul; `parts` keeps their order
    and widths, so `split(output)` returns them separately."""

    def __init__(self, name: str, in_features: int, parts: dict[str, int], bias: bool, dtype: torch.dtype) -> None:
        super().__init__(in_features, sum(parts.values()), bias, dtype)
        self.name = name
        self.parts = parts

    def split(self, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return y.split(list(self.parts.values()), dim=-1)

    def checkpoint_shards(self) -> Shards:
        shards: Shards = {}
        start = 0
        for part, width in self.parts.items():
            index = (slice(start, start + width),)
            shards[f"{part}.weight"] = (f"{self.name}.weight", index)
            if self.bias is not None:
                shards[f"{part}.bias"] = (f"{self.name}.bias", index)
            start += width
        return shards
