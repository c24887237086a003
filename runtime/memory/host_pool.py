"""The host memory tier's rows: KV of single tokens that left (or were copied out of) the device pool.

One preallocated host buffer of `capacity` tokens (pinned where the platform has pinned memory,
so device copies can run asynchronously), laid out as `KVPageIO` hands KV over: `[num_layers,
*layout]` with the slot axis `capacity` long. Rows are accounted per token, like the device
pool's slots; the radix tree's nodes record which rows hold their tokens
(runtime/memory/tree_node.py `host_slots`), and the host tier (runtime/memory/host_tier.py)
decides what to keep.

Invariants: a row is free or held by exactly one tree node; `used_tokens + available_tokens ==
capacity`; the pool is touched by the scheduler's thread only (the storage threads get copies).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

HostBuffer = Callable[[Sequence[int], torch.dtype], torch.Tensor]


class HostKVPool:
    def __init__(
        self, capacity: int, buffer_shape: Sequence[int], slot_axis: int, dtype: torch.dtype, allocate: HostBuffer
    ) -> None:
        """`buffer_shape`: the whole buffer's shape, `capacity` long on `slot_axis`."""
        if capacity < 1:
            raise ValueError(f"a host tier needs room for at least one token, got {capacity}")
        if buffer_shape[slot_axis] != capacity:
            raise ValueError(f"buffer shape {tuple(buffer_shape)} does not hold {capacity} tokens on axis {slot_axis}")
        self.capacity = capacity
        self.axis = slot_axis
        self.buffer = allocate(tuple(buffer_shape), dtype)
        self._free = torch.arange(capacity, dtype=torch.int64)

    @property
    def available_tokens(self) -> int:
        return self._free.numel()

    @property
    def used_tokens(self) -> int:
        return self.capacity - self._free.numel()

    @property
    def nbytes(self) -> int:
        return self.buffer.numel() * self.buffer.element_size()

    def alloc(self, count: int) -> torch.Tensor | None:
        """`count` free rows, or None when fewer are free (nothing is taken then)."""
        if count > self._free.numel():
            return None
        rows, self._free = self._free[:count], self._free[count:]
        return rows

    def free(self, rows: torch.Tensor) -> None:
        self._free = torch.cat([self._free, rows.to(torch.int64)])

    def write(self, rows: torch.Tensor, values: torch.Tensor) -> None:
        """Stores `values` (KV of `len(rows)` tokens, as `KVPageIO.read` gives it) at `rows`."""
        self.buffer.index_copy_(self.axis, rows, values.to(self.buffer.dtype))

    def read(self, rows: torch.Tensor) -> torch.Tensor:
        """A copy of the KV at `rows` (the pool may reuse them as soon as this returns)."""
        return self.buffer.index_select(self.axis, rows)

    def clear(self) -> None:
        self._free = torch.arange(self.capacity, dtype=torch.int64)
