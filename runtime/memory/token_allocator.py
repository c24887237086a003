"""Page-wise allocation of KV-cache slots.

The KV pool holds `num_pages * page_size` slots; slot `s` is offset `s % page_size` of page
`s // page_size` (see ops/attention.py and ops/kv_store.py). This allocator decides which slots
hold which tokens; the pool holds the bytes, and the radix cache says which slots are shared.

Invariants:
- Page 0 is reserved and never handed out: slot 0 (`PADDING_SLOT`) is where attention kernels
  point padded positions (the cpu backend pads decode rows with slot 0), so no real token may
  live there. Usable capacity is therefore `(num_pages - 1) * page_size` tokens.
- Token `i` of a sequence lives at offset `i % page_size` of its page: a sequence starts on a
  fresh page and fills its last page before taking a new one. Page-aligned prefixes of a
  sequence are thus whole pages, which is what lets the radix cache share them page by page.
- Every usable page is either free (in the free list, no allocated slot) or in use (at least
  one allocated slot), never both. A page returns to the free list when its last allocated
  slot is freed; slots of a page in use that were never handed out belong to the sequence
  whose last page it is (it grows into them).
- Freeing a slot that is not allocated (double free, padding slot, out of range) raises.

Slots are CPU int64 tensors. Out of memory is not an error: allocation returns None and the
caller evicts from the cache or retracts a request.

The allocator's own state (which slots are handed out, how many per page) lives in numpy arrays:
a decode step allocates one slot per row, and each of the few operations on that state costs a
microsecond or two in numpy against several in torch, whose per-op overhead added a tenth of a
millisecond to every batch-1 decode step.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from sglang.ops.step import PADDING_SLOT


class PagedTokenAllocator:
    """Hands out KV slots page-wise; `page_size == 1` is token-granular allocation."""

    def __init__(self, num_pages: int, page_size: int) -> None:
        if page_size < 1:
            raise ValueError(f"page_size must be at least 1, got {page_size}")
        if num_pages < 2:
            raise ValueError(f"num_pages must be at least 2 (page 0 is reserved), got {num_pages}")
        self.num_pages = num_pages
        self.page_size = page_size
        self.clear()

    def clear(self) -> None:
        """Frees everything (cache flush with no request running)."""
        self._allocated = np.zeros(self.num_slots, dtype=np.bool_)
        self._page_use = np.zeros(self.num_pages, dtype=np.int64)
        # A stack: popping from the end hands out low pages first and reuses recently freed ones.
        self._free_pages: list[int] = list(range(self.num_pages - 1, 0, -1))

    @property
    def num_slots(self) -> int:
        """Size of the KV buffer the pool must allocate, padding page included."""
        return self.num_pages * self.page_size

    @property
    def num_free_pages(self) -> int:
        return len(self._free_pages)

    def available_tokens(self) -> int:
        """Tokens that fit on free pages (room left in sequences' partial last pages excluded)."""
        return len(self._free_pages) * self.page_size

    def allocated_slots(self) -> torch.Tensor:
        """Every slot currently handed out, ascending (for audits and tests)."""
        return torch.from_numpy(self._allocated.nonzero()[0].astype(np.int64))

    def pages_needed(self, last_slots: Sequence[int | None], num_tokens: Sequence[int]) -> int:
        """Fresh pages `alloc_extend_batch(last_slots, num_tokens)` would take."""
        return sum(self._plan(last_slots, num_tokens)[1])

    def alloc_extend(self, last_slot: int | None, num_tokens: int) -> torch.Tensor | None:
        """Slots for `num_tokens` new tokens of one sequence whose last token sits at `last_slot`
        (None for a sequence with no token yet), or None when the free pages do not suffice."""
        return self.alloc_extend_batch([last_slot], [num_tokens])

    def alloc_extend_batch(self, last_slots: Sequence[int | None], num_tokens: Sequence[int]) -> torch.Tensor | None:
        """Slots for a batch (decode is `num_tokens == [1] * B`), packed sequence after sequence,
        all or nothing: None when the batch does not fit, with nothing allocated.

        The plan is made per sequence in Python and the pool's state is touched by a few numpy
        operations (see the module's docstring)."""
        in_page, fresh = self._plan(last_slots, num_tokens)
        known = [s for s in last_slots if s is not None]
        if any(s <= PADDING_SLOT or s >= self.num_slots for s in known):
            raise ValueError("last slot is the padding slot or out of range")
        if known and not self._allocated[known].all():
            raise ValueError("last slot is not allocated")
        total_pages = sum(fresh)
        if total_pages > len(self._free_pages):
            return None
        grown = [s + 1 + i for s, k in zip(last_slots, in_page) if s is not None for i in range(k)]
        if grown and (len(set(grown)) != len(grown) or self._allocated[grown].any()):
            raise ValueError("a last slot is not the last slot of its sequence (its page is taken)")

        pages = self._free_pages[len(self._free_pages) - total_pages :][::-1]
        del self._free_pages[len(self._free_pages) - total_pages :]
        slots: list[int] = []
        taken = 0
        for last, n, k, f in zip(last_slots, num_tokens, in_page, fresh):
            if k:
                slots.extend(range(last + 1, last + 1 + k))
            if self.page_size == 1:
                slots.extend(pages[taken : taken + f])
            else:
                for i, page in enumerate(pages[taken : taken + f]):
                    first = page * self.page_size
                    slots.extend(range(first, first + min(self.page_size, n - k - i * self.page_size)))
            taken += f
        allocated = np.array(slots, dtype=np.int64)
        self._allocated[allocated] = True
        np.add.at(self._page_use, allocated // self.page_size, 1)
        return torch.from_numpy(allocated)

    def free(self, slots: torch.Tensor | Sequence[int]) -> None:
        """Releases `slots`; each page whose slots are now all free returns to the free list."""
        slots = np.asarray(slots, dtype=np.int64).reshape(-1)
        if not slots.size:
            return
        if slots.min() <= PADDING_SLOT or slots.max() >= self.num_slots:
            raise ValueError("freeing the padding slot or a slot out of range")
        if np.unique(slots).size != slots.size or not self._allocated[slots].all():
            raise ValueError("double free: a slot is not allocated or appears twice")
        self._allocated[slots] = False
        pages = slots // self.page_size
        np.subtract.at(self._page_use, pages, 1)
        touched = np.unique(pages)
        self._free_pages.extend(touched[self._page_use[touched] == 0].tolist())

    def _plan(self, last_slots: Sequence[int | None], num_tokens: Sequence[int]) -> tuple[list[int], list[int]]:
        """Per sequence: tokens that go into its current last page, and fresh pages it takes."""
        if len(last_slots) != len(num_tokens):
            raise ValueError("last_slots and num_tokens differ in length")
        if any(n < 0 for n in num_tokens):
            raise ValueError("num_tokens must be non-negative")
        # A sequence with no token has no room, as one whose last page is full.
        in_page = [
            0 if s is None else min(self.page_size - 1 - s % self.page_size, n) for s, n in zip(last_slots, num_tokens)
        ]
        fresh = [-(-(n - k) // self.page_size) for n, k in zip(num_tokens, in_page)]
        return in_page, fresh
