"""The cpu_cpp family's multi-adapter LoRA: shrink and expand in C++ (csrc/lora.cpp).

Each row reads only its own slot's `A` and `B` rows, where torch_native multiplies every row by
every slot's weights; float32 with one rounding per output, like the reference (`ops.lora`).
"""

from __future__ import annotations

import torch

from sglang.platforms.kernels.cpu_cpp.build import ensure_built, kernel_ops

ensure_built()


def lora_shrink(x: torch.Tensor, a: torch.Tensor, token_slots: torch.Tensor) -> torch.Tensor:
    return kernel_ops().lora_shrink(x, a, token_slots)


def lora_expand(
    y: torch.Tensor,
    h: torch.Tensor,
    b: torch.Tensor,
    token_slots: torch.Tensor,
    scaling: torch.Tensor,
    out_widths: tuple[int, ...],
) -> torch.Tensor:
    return kernel_ops().lora_expand(y, h, b, token_slots, scaling, list(out_widths))
