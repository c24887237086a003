"""The gated MLP of a dense decoder layer: `down(act(gate(x)) * up(x))`; under tensor
parallelism gate/up are column-parallel and down row-parallel over the intermediate size."""

from __future__ import annotations

import torch

from sglang import ops
from sglang.ops.activation import GATED_ACTIVATIONS
from sglang.runtime.distributed.group import tp_group
from sglang.runtime.layers.module import Module
from sglang.runtime.layers.parallel import ColumnParallelLinear, RowParallelLinear
from sglang.runtime.layers.sharding import even_split


def gated_activation_op(hidden_act: str) -> str:
    """The `sglang.ops` name of the gated form of `hidden_act`, or a clear error."""
    if hidden_act not in GATED_ACTIVATIONS:
        raise ValueError(f"activation {hidden_act!r} is not supported (supported: {', '.join(GATED_ACTIVATIONS)})")
    return GATED_ACTIVATIONS[hidden_act]


class GatedMLP(Module):
    def __init__(self, hidden_size: int, intermediate_size: int, hidden_act: str, dtype: torch.dtype) -> None:
        super().__init__()
        split = even_split(intermediate_size, tp_group(), "the MLP intermediate size")
        self.gate_up_proj = ColumnParallelLinear(
            "gate_up_proj", hidden_size, {"gate_proj": split, "up_proj": split}, bias=False, dtype=dtype
        )
        self.down_proj = RowParallelLinear(split, hidden_size, dtype=dtype)
        self.activation_op = gated_activation_op(hidden_act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(getattr(ops, self.activation_op)(self.gate_up_proj(x)))
