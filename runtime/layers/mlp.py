"""The gated MLP of a dense decoder layer: `down(act(gate(x)) * up(x))`."""

from __future__ import annotations

import torch
from torch import nn

from sglang import ops
from sglang.ops.activation import GATED_ACTIVATIONS
from sglang.runtime.layers.linear import Linear, MergedLinear


def gated_activation_op(hidden_act: str) -> str:
    """The `sglang.ops` name of the gated form of `hidden_act`, or a clear error."""
    if hidden_act not in GATED_ACTIVATIONS:
        raise ValueError(f"activation {hidden_act!r} is not supported (supported: {', '.join(GATED_ACTIVATIONS)})")
    return GATED_ACTIVATIONS[hidden_act]


class GatedMLP(nn.Module):
    def __init__(self, hidden_size: int, intermediate_size: int, hidden_act: str, dtype: torch.dtype) -> None:
        super().__init__()
        self.gate_up_proj = MergedLinear(
            "gate_up_proj",
            hidden_size,
            {"gate_proj": intermediate_size, "up_proj": intermediate_size},
            bias=False,
            dtype=dtype,
        )
        self.down_proj = Linear(intermediate_size, hidden_size, bias=False, dtype=dtype)
        self.activation_op = gated_activation_op(hidden_act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(getattr(ops, self.activation_op)(self.gate_up_proj(x)))
