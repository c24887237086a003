"""The `linear` candidate of the cpu_cpp family: quantized weights through the C++ kernels.

A dense weight goes to torch's own dense kernel (every quantized model has some dense layers);
a `QuantizedWeight` goes to the kernel of its bit width, which has two regimes by the number of
input rows. Up to `INT16_ACTIVATION_MAX_ROWS[bits]` rows (decode) it quantizes the activations
to int16 per 32-value block and multiplies in integers: each input value is off by at most half
its block's step of `max|x_block| / 32767`. With more rows (prefill), or int8 groups that are
not whole 32-value blocks (8 or 16 features), it dequantizes tiles of rows into float32 and
accumulates in float32: the reference to within summation order. In each regime a row's output
does not depend on the other rows of the call.

The int16 kernel reads the weight's tile records (the same values, one stream per four rows),
which the first call builds and keeps in `weight.kernel_layouts` (the model loader makes that
first call).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from sglang.ops.quant import QuantizedWeight
from sglang.platforms.kernels.cpu_cpp.build import ensure_built, kernel_ops

ensure_built()

TILES = "cpu_cpp.tiles"
INT16_ACTIVATION_MAX_ROWS = {4: 32, 8: 32}
"""By weight bits, the input rows up to which the kernels take int16 activations: the C++
formats' `max_rows` (a test pins each boundary on both sides)."""


def linear(x: torch.Tensor, weight: torch.Tensor | QuantizedWeight, bias: torch.Tensor | None = None) -> torch.Tensor:
    if not isinstance(weight, QuantizedWeight):
        return F.linear(x, weight, bias)
    if x.shape.numel() == 0:
        # No rows (a step that needs no logits, e.g. max_new_tokens 0): the kernels' tiling
        # assumes at least one row.
        return x.new_empty(*x.shape[:-1], weight.shape[0])
    kernels = kernel_ops()
    if weight.format.bits == 4:
        return kernels.int4_linear(x, weight.qdata, weight.scales, weight.offsets, weight.group, tiles(weight), bias)
    return kernels.int8_linear(x, weight.qdata, weight.scales, weight.group, tiles(weight), bias)


def tiles(weight: QuantizedWeight) -> torch.Tensor:
    """The weight's records for the int16 kernel, built on first use (empty where it does not serve
    the weight's groups); float16 scales where every scale and offset is exact in float16."""
    layout = weight.kernel_layouts.get(TILES)
    if layout is None:
        kernels = kernel_ops()
        if weight.format.bits == 4:
            layout = kernels.int4_tiles(weight.qdata, weight.scales, weight.offsets, weight.group)
        else:
            layout = kernels.int8_tiles(weight.qdata, weight.scales, weight.group)
        weight.kernel_layouts[TILES] = layout
    return layout
