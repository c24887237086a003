"""The cpu_quant family: weight-only int8 and int4 groupwise linear for host tensors.

The kernels are C++ (built once per machine, cached; see build.py) and compute in float32, so the
family serves float32 models; other dtypes keep the reference (dequantize, then dense).
"""

import torch

from sglang.ops.selection import Candidate, Requirements
from sglang.platforms.kernels.registry import KernelFamily

_HERE = "sglang.platforms.kernels.cpu_quant"

WEIGHT_FORMATS = frozenset({"int4_g32", "int4_g64", "int4_g128", "int8_g32", "int8_g64", "int8_g128", "int8_channel"})
"""Quantized formats only: a dense model keeps torch's own linear (and never builds the kernels);
the dense layers of a quantized model go through the candidate to torch's dense kernel."""

FAMILY = KernelFamily(
    name="cpu_quant",
    description="weight-only int8/int4 groupwise linear (C++, AVX2/FMA), float32 host tensors",
    candidates=(
        Candidate(
            "linear",
            "cpu_quant",
            f"{_HERE}.linear:linear",
            Requirements(dtypes=frozenset({torch.float32}), weight_formats=WEIGHT_FORMATS),
        ),
    ),
)
