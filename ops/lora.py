"""LoRA over a batch of many adapters: shrink (`x @ A^T`) and expand (`y += s * h @ B^T`).

Adapters live in slots of stacked weights; row `t` of a batch uses slot `token_slots[t]`. The
scheduler packs a batch in segments (consecutive rows of one request, hence one adapter); the op
contract is the segments spelled out per token, as the attention contract is token level, so
that a captured or jitted step reads one static index tensor and no host values.

Layouts, for `S` slots, rank `R` (the largest rank served; a smaller adapter's extra rows of `A`
and columns of `B` are zero, which adds exactly nothing), and a projection fused from `N` parts
(q/k/v: 3, gate/up: 2, a plain one: 1) whose outputs are `out_widths` wide:
- `a` `[S, N * R, H]`: part `p`'s `A` in rows `p * R : (p + 1) * R`;
- `b` `[S, O, R]` with `O = sum(out_widths)`: part `p`'s `B` in its own output rows;
- `scaling` `[S]` (float32): each slot's `lora_alpha / r`; a slot with no adapter (the base
  model's) has zero weights and zero scaling. Slot 0 is always the base model's, so a candidate
  may skip its rows: their `h` is zero and their `y` unchanged, exactly what zero weights give.
Both ops compute in float32 and round once to the input dtype.

`slot_runs` groups a batch's adapter rows by slot for candidates that make one GEMM per slot; it
is computed once per step (the step's ~100 LoRA calls share one `token_slots`), not per call.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

BASE_SLOT = 0
"""The base model's slot: zero weights and zero scaling."""


@dataclass(frozen=True)
class SlotRuns:
    """A batch's rows that use an adapter, grouped by slot (batch order within a slot): run `i`
    is rows `rows[bounds[i]:bounds[i + 1]]`, all of slot `slots[i]`. Base rows are left out."""

    token_slots: torch.Tensor
    """A copy of the slots this grouping is of."""
    rows: torch.Tensor
    slots: tuple[int, ...]
    bounds: tuple[int, ...]

    def runs(self) -> list[tuple[int, int, int]]:
        """(slot, start, end) of each run, into `rows`."""
        return [(slot, self.bounds[i], self.bounds[i + 1]) for i, slot in enumerate(self.slots)]


_last_runs: list[SlotRuns] = []


def slot_runs(token_slots: torch.Tensor) -> SlotRuns:
    """`token_slots` grouped by slot; the previous call's answer when the slots are equal (every
    LoRA layer of a step passes the same ones), so a step sorts its rows once."""
    if _last_runs:
        last = _last_runs[0]
        if last.token_slots.shape == token_slots.shape and torch.equal(last.token_slots, token_slots):
            return last
    adapter_rows = (token_slots != BASE_SLOT).nonzero().squeeze(1)
    ordered, order = token_slots.index_select(0, adapter_rows).sort(stable=True)
    slots, counts = ordered.unique_consecutive(return_counts=True)
    bounds = [0]
    for count in counts.tolist():
        bounds.append(bounds[-1] + count)
    grouped = SlotRuns(token_slots.clone(), adapter_rows.index_select(0, order), tuple(slots.tolist()), tuple(bounds))
    _last_runs[:] = [grouped]
    return grouped


def lora_shrink(x: torch.Tensor, a: torch.Tensor, token_slots: torch.Tensor) -> torch.Tensor:
    """`h[t] = x[t] @ a[token_slots[t]]^T`: `[T, H]` to `[T, N * R]`."""
    weights = a.index_select(0, token_slots).float()
    return torch.bmm(weights, x.float().unsqueeze(-1)).squeeze(-1).to(x.dtype)


def part_of_column(out_widths: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """`[O]`: the index of the part each output column belongs to."""
    widths = torch.tensor(out_widths, device=device)
    return torch.repeat_interleave(torch.arange(len(out_widths), device=device), widths)


def lora_expand(
    y: torch.Tensor,
    h: torch.Tensor,
    b: torch.Tensor,
    token_slots: torch.Tensor,
    scaling: torch.Tensor,
    out_widths: tuple[int, ...],
) -> torch.Tensor:
    """`y[t, cols of part p] + scaling[s] * h[t, p-th R block] @ b[s, cols of part p]^T`, `s =
    token_slots[t]`: returns the new `[T, O]` (the input is not modified)."""
    rank = b.shape[-1]
    per_part = h.float().unflatten(-1, (len(out_widths), rank))  # [T, N, R]
    per_column = per_part.index_select(1, part_of_column(out_widths, h.device))  # [T, O, R]
    delta = (b.index_select(0, token_slots).float() * per_column).sum(-1)
    return (y.float() + delta * scaling.index_select(0, token_slots)[:, None]).to(y.dtype)
