"""Token embedding lookup and `x @ W^T + b`, over a typed weight (dense or `QuantizedWeight`).

The references dequantize and call the dense op: a kernel serving a quantized format must match
them to within float32 summation order. Embedding dequantizes only the looked-up rows.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from sglang.ops.quant import QuantizedWeight

Weight = torch.Tensor | QuantizedWeight


def embedding(input_ids: torch.Tensor, weight: Weight) -> torch.Tensor:
    if isinstance(weight, QuantizedWeight):
        flat = input_ids.reshape(-1)
        rows = weight.rows(flat).dequantize(weight.dtype)
        return rows.reshape(*input_ids.shape, weight.shape[1])
    return F.embedding(input_ids, weight)


def linear(x: torch.Tensor, weight: Weight, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`weight` is `[out_features, in_features]`, the layout checkpoints store."""
    if isinstance(weight, QuantizedWeight):
        return F.linear(x, weight.dequantize(x.dtype), bias)
    return F.linear(x, weight, bias)
