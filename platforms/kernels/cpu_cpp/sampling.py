"""The cpu_cpp family's greedy sampling: each row's argmax in one C++ scan (csrc/argmax.cpp).

torch's argmax reduction over a vocabulary-wide row costs an order of magnitude more on the host
(`benchmarks/README.md`, "Measured costs"). The kernel reads the row once with vector compares and
keeps torch's semantics exactly (first maximum, a NaN above all), so it matches the reference
index for index.
"""

from __future__ import annotations

import torch

from sglang.platforms.kernels.cpu_cpp.build import ensure_built, kernel_ops

ensure_built()


def argmax(logits: torch.Tensor) -> torch.Tensor:
    return kernel_ops().argmax(logits)
