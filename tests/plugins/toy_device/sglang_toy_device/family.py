"""The toy_kernels family's declaration: which ops it serves and what each kernel needs."""

from __future__ import annotations

import torch

from sglang.ops.selection import Candidate, Requirements
from sglang.platforms.kernels.registry import KernelFamily

_HERE = "sglang_toy_device.kernels"
_FLOAT32 = Requirements(dtypes=frozenset({torch.float32}))

FAMILY = KernelFamily(
    name="toy_kernels",
    description="hand-written host kernels of the toy device",
    candidates=(
        Candidate("rms_norm", "toy_kernels", f"{_HERE}:rms_norm", _FLOAT32, tunable=True),
        Candidate("silu_and_mul", "toy_kernels", f"{_HERE}:silu_and_mul"),
        Candidate("log_softmax", "toy_kernels", f"{_HERE}:log_softmax"),
    ),
)
