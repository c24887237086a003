"""Multi-adapter LoRA as two dense GEMMs over every slot, masked per row.

Shrink computes `x` against the `A` of every slot at once and keeps each row's own slot; expand
spreads each row's `h` into its slot's block of a `[T, S * R]` matrix (zeros elsewhere, scaled by
the slot's scaling) and multiplies by every slot's `B` laid side by side. Both are plain matmuls
of static shapes (no host reads, no per-segment loop), so they run under capture and jit, and for
the few slots a batch holds the extra columns cost less than a gather of per-row weights.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def lora_shrink(x: torch.Tensor, a: torch.Tensor, token_slots: torch.Tensor) -> torch.Tensor:
    slots, width, _ = a.shape
    every = F.linear(x.float(), a.flatten(0, 1).float()).unflatten(-1, (slots, width))  # [T, S, N*R]
    index = token_slots[:, None, None].expand(-1, 1, width)
    return every.gather(1, index).squeeze(1).to(x.dtype)


def lora_expand(
    y: torch.Tensor,
    h: torch.Tensor,
    b: torch.Tensor,
    token_slots: torch.Tensor,
    scaling: torch.Tensor,
    out_widths: tuple[int, ...],
) -> torch.Tensor:
    slots, _, rank = b.shape
    mine = token_slots[:, None] == torch.arange(slots, device=token_slots.device)  # [T, S]
    weights = mine.float() * scaling.float()[None, :]
    parts = h.float().unflatten(-1, (len(out_widths), rank))  # [T, N, R]
    deltas, start = [], 0
    for p, width in enumerate(out_widths):
        spread = (weights[:, :, None] * parts[:, None, p, :]).flatten(1)  # [T, S*R]
        side_by_side = b[:, start : start + width, :].float().permute(1, 0, 2).flatten(1)  # [width, S*R]
        deltas.append(F.linear(spread, side_by_side))
        start += width
    return (y.float() + torch.cat(deltas, dim=-1)).to(y.dtype)
