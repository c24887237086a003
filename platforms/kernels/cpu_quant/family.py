"""The cpu_quant family: C++ kernels for host tensors: weight-only int8/int4 groupwise linear, and
paged decode attention that reads the KV pool in place.

The kernels are built once per machine and cached (see build.py) and take float32 activations, so
the family serves float32 models; other dtypes keep the next family's or the reference.
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
    description="C++ host kernels (AVX2/FMA): int8/int4 weight linear (int8 activations at decode), "
    "in-place paged decode attention; float32",
    candidates=(
        Candidate(
            "linear",
            "cpu_quant",
            f"{_HERE}.linear:linear",
            Requirements(dtypes=frozenset({torch.float32}), weight_formats=WEIGHT_FORMATS),
        ),
        Candidate(
            "attention_backend",
            "cpu_quant",
            f"{_HERE}.attention:PoolDecodeAttention",
            Requirements(dtypes=frozenset({torch.float32})),
        ),
    ),
)
