"""The host memory tier: whole KV blocks that left (or were copied out of) the device pool.

One preallocated host buffer of `capacity` blocks (pinned where the platform has pinned memory,
so device copies can run asynchronously), each block `[num_layers, *layout]` with the slot
axis `block_tokens` long, exactly as `KVPageIO.read` hands it over. Blocks are keyed like the
storage tier's (runtime/memory/page_store.py `block_keys`: the chained hash of the prefix up to
the block's end, the model and the adapter), so a key found here is the same KV a stored file
with that key would hold.

Invariants:
- A key maps to at most one buffer row, and a row to at most one key; `len(self)` rows are used.
- The pool is touched by the scheduler's thread only (the storage threads get their own copies).
- When full, `put` drops the least recently used block (`get` and `put` refresh a block). A
  dropped block may still be on its way to storage: the writer holds its own copy.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence

import torch

HostBuffer = Callable[[Sequence[int], torch.dtype], torch.Tensor]


class HostKVPool:
    def __init__(self, capacity: int, block_shape: Sequence[int], dtype: torch.dtype, allocate: HostBuffer) -> None:
        if capacity < 1:
            raise ValueError(f"a host tier needs room for at least one block, got {capacity}")
        self.capacity = capacity
        self.buffer = allocate((capacity, *block_shape), dtype)
        self._rows: OrderedDict[str, int] = OrderedDict()  # least recently used first
        self._free = list(range(capacity - 1, -1, -1))
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, key: str) -> bool:
        return key in self._rows

    @property
    def nbytes(self) -> int:
        return self.buffer.numel() * self.buffer.element_size()

    def get(self, key: str) -> torch.Tensor | None:
        """The block under `key` (a view of the pool: copy it before the pool may reuse the row)."""
        row = self._rows.get(key)
        if row is None:
            return None
        self._rows.move_to_end(key)
        return self.buffer[row]

    def put(self, key: str, block: torch.Tensor) -> None:
        """Keeps a copy of `block` under `key`, dropping the least recently used block if full."""
        if key in self._rows:
            self._rows.move_to_end(key)
            return
        if not self._free:
            _, row = self._rows.popitem(last=False)
            self._free.append(row)
            self.evicted += 1
        row = self._free.pop()
        self.buffer[row].copy_(block)
        self._rows[key] = row

    def clear(self) -> None:
        self._rows.clear()
        self._free = list(range(self.capacity - 1, -1, -1))
