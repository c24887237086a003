"""Window slots: where windowed (sliding-window) layers keep a token's K/V, apart from the full pool.

A model whose layers alternate windowed and global attention needs every token in its global
layers, but only the last `window` tokens of each sequence in its windowed ones. With the window
pool on, windowed layers' KV buffers have one slot per *window slot* (fewer than the full pool's
slots, `--swa-full-tokens-ratio` of them), and a token holds a window slot only while a query may
still see it: after each step, the window slots of a request's tokens that fell out of its
window are freed (`free_window`), the full slots stay.

The step contract keeps one full-slot list (`AttentionInputs.kv_slots`); this pool maps each full
slot to its window slot (`full_to_window`, -1 for none) and derives the windowed layers' list
from it (`window_slots`): tokens without a window slot read the padding slot, which no query
sees (they lie outside every query's window, and the window buffers' padding slot holds zeros).

Invariants:
- `full_to_window[s] >= 0` only for allocated full slots, and maps distinct full slots to
  distinct allocated window slots; every allocated window slot is mapped from exactly one full slot.
- Freeing a full slot frees its window slot (`free`): whatever frees full slots (finish,
  retraction, eviction from the radix cache, rejected drafts) frees both kinds through here.
- Window slots are allocated token by token (page size 1): windowed layers read token-level slot
  lists, so the window list needs no page structure.
"""

from __future__ import annotations

import torch

from sglang.ops.step import PADDING_SLOT
from sglang.runtime.memory.token_allocator import PagedTokenAllocator


class WindowPool:
    def __init__(self, num_full_slots: int, num_window_tokens: int, window: int) -> None:
        """`num_window_tokens` usable window slots (the padding slot comes on top); `window`: the
        model's sliding window, the tokens a query of a windowed layer sees (itself included)."""
        if window < 1:
            raise ValueError(f"window must be at least 1, got {window}")
        self.window = window
        self.allocator = PagedTokenAllocator(num_window_tokens + 1, 1)
        self.full_to_window = torch.full((num_full_slots,), -1, dtype=torch.int64)

    @property
    def num_slots(self) -> int:
        """Slots of a windowed layer's KV buffer, padding slot included."""
        return self.allocator.num_slots

    def available_tokens(self) -> int:
        return self.allocator.available_tokens()

    def shortfall(self, num_tokens: int) -> int:
        """Window slots missing for `num_tokens` new tokens (0 when they fit)."""
        return max(num_tokens - self.allocator.available_tokens(), 0)

    def has_room(self, first_chunk: int, running: int) -> bool:
        """Whether a request's `first_chunk` tokens and its window fit beside `running` requests'
        next tokens in the free window slots (cached prefixes' slots not counted)."""
        return not self.shortfall(first_chunk + self.window + running)

    def free_left_window(self, slots: torch.Tensor, num_cached: int, step_start: int) -> None:
        """After a step of a running sequence (`slots`, its first `num_cached` the radix cache's,
        `step_start` its length before the step), frees the window slots of its own tokens that
        left its window: a later query at position `p >= len(slots)` sees positions above
        `p - window`, so those below `len(slots) - window + 1` are out of every window to come.
        The radix cache's tokens keep theirs (it frees them with their full slots)."""
        end = slots.numel() - self.window + 1
        start = max(num_cached, step_start - self.window + 1)
        if end > start:
            self.free(slots[start:end])

    def allocate(self, full_slots: torch.Tensor) -> bool:
        """Gives each of `full_slots` (just allocated, unmapped) a window slot; all or nothing."""
        window_slots = self.allocator.alloc_extend(None, full_slots.numel())
        if window_slots is None:
            return False
        if (self.full_to_window[full_slots] >= 0).any():
            self.allocator.free(window_slots)
            raise ValueError("a full slot already has a window slot")
        self.full_to_window[full_slots] = window_slots
        return True

    def free(self, full_slots: torch.Tensor) -> None:
        """Frees the window slots of `full_slots` that have one (they are being freed)."""
        full_slots = torch.as_tensor(full_slots, dtype=torch.int64)
        mapped = self.full_to_window[full_slots]
        held = mapped >= 0
        if held.any():
            self.allocator.free(mapped[held])
            self.full_to_window[full_slots[held]] = -1

    def adopt(self, old: torch.Tensor, new: torch.Tensor) -> None:
        """Where a sequence's full slot changed from `old[i]` to `new[i]` (the radix cache gave it
        its own copy of a page) and the new slot has no window slot, the old one's moves to it."""
        moved = (old != new) & (self.full_to_window[new] < 0) & (self.full_to_window[old] >= 0)
        if moved.any():
            self.full_to_window[new[moved]] = self.full_to_window[old[moved]]
            self.full_to_window[old[moved]] = -1

    def window_slots(self, kv_slots: torch.Tensor) -> torch.Tensor:
        """The windowed layers' slot list for a step's full-slot list: the padding slot where a
        token has no window slot (it lies outside every window of the step)."""
        return self.full_to_window[kv_slots].clamp_min(PADDING_SLOT)

    def usable_prefix(self, slots: torch.Tensor, page_size: int) -> int:
        """The longest prefix of a cached sequence (`slots`, its full slots) that a request can
        extend: a multiple of `page_size` whose last `window` tokens all hold window slots (the
        new tokens' windows reach back over them)."""
        missing = torch.zeros(slots.numel() + 1, dtype=torch.int64)
        torch.cumsum(self.full_to_window[slots] < 0, 0, out=missing[1:])
        for length in range(slots.numel() - slots.numel() % page_size, 0, -page_size):
            if missing[length] == missing[max(length - self.window, 0)]:
                return length
        return 0

    def clear(self) -> None:
        """Frees everything (cache flush with no request running)."""
        self.allocator.clear()
        self.full_to_window.fill_(-1)

    def allocated_slots(self) -> torch.Tensor:
        """Every window slot handed out, ascending (for audits and tests)."""
        return self.allocator.allocated_slots()
