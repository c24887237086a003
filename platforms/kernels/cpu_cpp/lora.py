"""The cpu_cpp family's multi-adapter LoRA: shrink and expand in C++ (csrc/lora.cpp) for small
batches, torch_native's masked GEMMs for large ones.

The kernels read only each row's own slot's `A` and `B` rows, where torch_native multiplies every
row by every slot's weights and keeps its own; that wins while the rows are few (decode: 2-3x
faster at 8 rows). From a few tens of rows the BLAS GEMMs over every slot win instead
(`benchmarks/README.md`, "LoRA ops"), so eager batches over `KERNEL_MAX_ROWS` rows take them.
A traced (captured) step always runs the kernels: captured steps are decode buckets, and under
the tracer a row count is a traced value whose comparison would fail the capture. Both
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


def _gemm_rows(x: torch.Tensor) -> bool:
    return not torch.jit.is_tracing() and x.shape[0] > KERNEL_MAX_ROWS


def lora_shrink(x: torch.Tensor, a: torch.Tensor, token_slots: torch.Tensor) -> torch.Tensor:
    if _gemm_rows(x):
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
    if _gemm_rows(y):
        return gemm.lora_expand(y, h, b, token_slots, scaling, out_widths)
    return kernel_ops().lora_expand(y, h, b, token_slots, scaling, list(out_widths))
