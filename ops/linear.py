"""Dense layers: token embedding lookup and `x @ W^T + b`."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def embedding(input_ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return F.embedding(input_ids, weight)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`weight` is `[out_features, in_features]`, the layout checkpoints store."""
    return F.linear(x, weight, bias)
