"""One arena for the intermediate buffers of every taped decode step.

A recorded step's kernels write their outputs into buffers the step allocated as it ran, and a
tape keeps them: every layer's activations, ~1.4 MB per row of the embedded model, so each
bucket held its own copy of the whole forward's intermediates (the buckets up to 32 rows, ~0.8
GB between them). Replays never overlap, and nothing reads a step's intermediates after its
replay but its logits, so `TapeArena.place` gives each intermediate storage an offset in one
byte buffer shared by every tape, by liveness: bytes a storage used are reused by one first
written after its last use. The arena grows in place (`resize_`) to the largest bucket's plan;
tapes recorded before keep viewing it.

Invariants: a placed storage was created while the step ran (it first appears as a call's
result) and is written by a call before any call reads it (a kernel's output, or an empty
factory's buffer, which no call reads before writing); storages that existed before (weights,
KV buffers, static inputs) and the storages kept out (the logits') are never placed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

ALIGN = 64
"""Offsets are multiples of a cache line (and so of every element size)."""


def storage_key(t: torch.Tensor) -> int:
    """Identifies a live tensor's storage (zero for an empty one, which is never placed)."""
    storage = t.untyped_storage()
    return storage.data_ptr() if storage.nbytes() else 0


def tensors_in(values: Sequence[Any]) -> Iterator[torch.Tensor]:
    for value in values:
        if isinstance(value, torch.Tensor):
            yield value
        elif isinstance(value, (list, tuple)):
            yield from tensors_in(value)


@dataclass
class _Lifetime:
    first: int
    last: int
    nbytes: int


class TapeArena:
    """The shared buffer; `place` plans one tape's intermediates into it."""

    def __init__(self) -> None:
        self.storage = torch.UntypedStorage(0)

    def place(self, calls: Sequence[Sequence[Any]], created: set[int]) -> dict[int, int]:
        """Offsets in the arena of the storages in `created` that `calls` (each call's tensor
        arguments, in replay order) use, planned by their first and last use; grows the arena
        to hold them."""
        lifetimes: dict[int, _Lifetime] = {}
        for index, args in enumerate(calls):
            for t in tensors_in(args):
                key = storage_key(t)
                if key not in created:
                    continue
                if key in lifetimes:
                    lifetimes[key].last = index
                else:
                    lifetimes[key] = _Lifetime(index, index, t.untyped_storage().nbytes())
        offsets: dict[int, int] = {}
        live: list[tuple[int, int, int]] = []  # (offset, end, last use), sorted by offset
        for key, life in sorted(lifetimes.items(), key=lambda item: item[1].first):
            live = [block for block in live if block[2] >= life.first]
            size = -(-life.nbytes // ALIGN) * ALIGN
            offset = 0
            for start, end, _ in live:  # the lowest gap that fits
                if start - offset >= size:
                    break
                offset = max(offset, end)
            offsets[key] = offset
            live = sorted([*live, (offset, offset + size, life.last)])
        peak = max((offsets[k] + lifetimes[k].nbytes for k in offsets), default=0)
        if peak > self.storage.nbytes():
            self.storage.resize_(peak)
        return offsets

    def view(self, t: torch.Tensor, offset: int) -> torch.Tensor:
        """`t`'s elements, shape and strides, over the arena from byte `offset` (its storage's)."""
        start = offset // t.element_size() + t.storage_offset()
        return torch.empty(0, dtype=t.dtype).set_(self.storage, start, t.size(), t.stride())
