"""The cpu_cpp family's multi-adapter LoRA: expand in C++ (csrc/lora.cpp) at every size, shrink in
C++ for small batches and as one torch GEMM per adapter in the batch for large eager ones.

The kernels group the rows by slot, skip the base model's rows and read each slot's `A` and `B`
once per call, where torch_native multiplies every row by every slot's weights and keeps its own.
The expand kernel accumulates rank-wide tiles of `B` with vector FMAs and beats per-slot GEMMs at
every size measured (16 to 1024 rows, 2-4x at 1024; `benchmarks/README.md`, "Multi-LoRA"); the
shrink kernel is a dot product per (row, rank row), which BLAS GEMMs beat from about 64 rows, so
eager batches over `SHRINK_KERNEL_MAX_ROWS` rows (prefill) make one GEMM per slot the batch uses
over its rows grouped by `ops.lora.slot_runs` (once per step). A traced (captured) step always
runs the kernels: under the tracer a row count or a host read of the slots would be replayed as
a constant. Both paths are float32 with one rounding per output, like the reference (`ops.lora`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from sglang.ops.lora import slot_runs
from sglang.platforms.kernels.cpu_cpp.build import ensure_built, kernel_ops

ensure_built()

SHRINK_KERNEL_MAX_ROWS = 64
"""Embedded-model shapes, 4 and 16 adapters: the shrink kernel ties GEMMs at 32-64 rows, loses from 128."""


def lora_shrink(x: torch.Tensor, a: torch.Tensor, token_slots: torch.Tensor) -> torch.Tensor:
    if torch.jit.is_tracing() or x.shape[0] <= SHRINK_KERNEL_MAX_ROWS:
        return kernel_ops().lora_shrink(x, a, token_slots)
    grouped = slot_runs(token_slots)
    out = x.new_zeros((x.shape[0], a.shape[1]))
    if grouped.slots:
        rows = x.index_select(0, grouped.rows)
        shrunk = torch.cat([F.linear(rows[start:end], a[slot]) for slot, start, end in grouped.runs()])
        out.index_copy_(0, grouped.rows, shrunk)
    return out


def lora_expand(
    y: torch.Tensor,
    h: torch.Tensor,
    b: torch.Tensor,
    token_slots: torch.Tensor,
    scaling: torch.Tensor,
    out_widths: tuple[int, ...],
) -> torch.Tensor:
    return kernel_ops().lora_expand(y, h, b, token_slots, scaling, list(out_widths))
