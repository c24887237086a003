"""The cpu_cpp family's multi-adapter LoRA: shrink and expand in C++ (csrc/lora.cpp) for small
batches, one torch GEMM per adapter in the batch for large eager ones.

The kernels read only each row's own slot's `A` and `B` rows, where torch_native multiplies every
row by every slot's weights and keeps its own; that wins while the rows are few (decode: 2-3x
faster at 8 rows). From a few tens of rows BLAS GEMMs win (`benchmarks/README.md`, "LoRA ops"),
so eager batches over `KERNEL_MAX_ROWS` rows (prefill) group their rows by slot on the host and
make one GEMM per slot the batch uses, skipping slots of zero scaling (the base model's): the
cost follows the adapters the batch uses, not the slots the server holds. A traced (captured)
step always runs the kernels: captured steps are decode buckets, and under the tracer a row
count or a host read of the slots would be replayed as a constant. Both paths are float32 with
one rounding per output, like the reference (`ops.lora`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from sglang.platforms.kernels.cpu_cpp.build import ensure_built, kernel_ops

ensure_built()

KERNEL_MAX_ROWS = 16
"""Measured with 5 slots on the embedded model's shapes: the kernels win at 8 rows, lose from 32."""


def _rows_by_slot(token_slots: torch.Tensor) -> list[tuple[int, torch.Tensor]]:
    """Each slot the batch uses, with the indices of its rows (one host read of the slots)."""
    slots = token_slots.unique()
    return [(slot, (token_slots == slot).nonzero().squeeze(1)) for slot in slots.tolist()]


def _gemm_rows(x: torch.Tensor) -> bool:
    return not torch.jit.is_tracing() and x.shape[0] > KERNEL_MAX_ROWS


def lora_shrink(x: torch.Tensor, a: torch.Tensor, token_slots: torch.Tensor) -> torch.Tensor:
    if _gemm_rows(x):
        out = x.new_zeros((x.shape[0], a.shape[1]))
        for slot, rows in _rows_by_slot(token_slots):
            out.index_copy_(0, rows, F.linear(x.index_select(0, rows), a[slot]))
        return out
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
        out = y.clone()
        rank = b.shape[-1]
        scales = scaling.tolist()
        for slot, rows in _rows_by_slot(token_slots):
            if scales[slot] == 0.0:
                continue
            parts = h.index_select(0, rows).unflatten(-1, (len(out_widths), rank))
            columns = b[slot].split(list(out_widths))
            delta = torch.cat([F.linear(parts[:, p], columns[p]) for p in range(len(out_widths))], dim=-1)
            out.index_copy_(0, rows, y.index_select(0, rows) + delta * scales[slot])
        return out
    return kernel_ops().lora_expand(y, h, b, token_slots, scaling, list(out_widths))
