"""The cpu_cpp family's multi-adapter LoRA: shrink and expand in C++ (csrc/lora.cpp) for small
batches, torch_native's masked GEMMs for large ones.

The kernels read only each row's own slot's `A` and `B` rows, where torch_native multiplies every
row by every slot's weights and keeps its own; that wins while the rows are few (decode: 2-3x
faster at 8 rows). From a few tens of rows the BLAS GEMMs over every slot win instead
(`benchmarks/README.md`, "LoRA ops"), so batches over `KERNEL_MAX_ROWS` rows take them. The
choice is by the batch's shape only (no host reads), so a captured step makes it once. Both
paths are float32 with one rounding per output, like the reference (`ops.lora`).
"""

from __future__ import annotations

import torch

from sglang.platforms.kernels.cpu_cpp.build import ensure_built, kernel_ops
from sglang.platforms.kernels.torch_native import lora as gemm

ensure_built()

KERNEL_MAX_ROWS = 16
"""Measured with 5 slots on the embedded model's shapes: the kernels win at 8 rows, tie or lose
from 32."""


def lora_shrink(x: torch.Tensor, a: torch.Tensor, token_slots: torch.Tensor) -> torch.Tensor:
    if x.shape[0] > KERNEL_MAX_ROWS:
        return gemm.lora_shrink(x, a, token_slots)
    return kernel_ops().lora_shrink(x, a, token_slots)


def lora_expand(
    y: torch.Tensor,
    h: torch.Tensor,
    b: torch.Tensor,
    token_slots: torch.Tensor,
    scaling: torch.Tensor,
    out_widths: tuple[int, ...],
) -> torch.Tensor:
    if y.shape[0] > KERNEL_MAX_ROWS:
        return gemm.lora_expand(y, h, b, token_slots, scaling, out_widths)
    return kernel_ops().lora_expand(y, h, b, token_slots, scaling, list(out_widths))
