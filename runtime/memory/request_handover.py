"""How a request hands its KV to the radix tree: when it finishes (or is retracted or aborted)
and, while it runs, once its prefill is done (so requests arriving meanwhile share it).

A mixin of `RadixCache` (runtime/memory/radix_cache.py), written against its `insert`,
`match_prefix` and lock counts. In both hand-overs `slots[i]` holds `token_ids[i]`, and
`slots[:match.num_cached]` are the tree's, locked by `match`; afterwards every slot the request
allocated is either the tree's or freed, exactly once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from sglang.runtime.memory.tree_node import MatchResult

FreeFn = Callable[[torch.Tensor], None]


class RequestHandover:
    """Uses the tree's `insert`, `match_prefix`, `inc_lock_ref` and `dec_lock_ref`."""

    page_size: int
    disable: bool

    def cache_finished(
        self,
        token_ids: Sequence[int],
        slots: torch.Tensor,
        match: MatchResult,
        free_fn: FreeFn,
        priority: int = 0,
    ) -> None:
        """A finished (or aborted) request hands over its KV. Its whole pages are cached,
        duplicates of what another request cached meanwhile and the partial last page are freed,
        and its lock is released. Afterwards the request owns no slot."""
        if self.disable:
            free_fn(slots[match.num_cached :])
            return
        aligned = self._adopt_pages(token_ids, slots, match, free_fn, priority)
        free_fn(slots[aligned:])
        self.dec_lock_ref(match.last_node)

    def cache_unfinished(
        self,
        token_ids: Sequence[int],
        slots: torch.Tensor,
        match: MatchResult,
        free_fn: FreeFn,
        priority: int = 0,
    ) -> tuple[MatchResult, torch.Tensor]:
        """Caches a running request's whole pages so others can share them (chunked prefill).
        Returns its new match (locked in place of the old one) and its slots, where any slot that
        duplicated the tree's (freed here) is replaced by the tree's."""
        if self.disable:
            return match, slots
        aligned = self._adopt_pages(token_ids, slots, match, free_fn, priority)
        new_match = self.match_prefix(token_ids[:aligned])
        self.inc_lock_ref(new_match.last_node)
        self.dec_lock_ref(match.last_node)
        return new_match, torch.cat([new_match.slots, slots[aligned:]])

    def _adopt_pages(
        self, token_ids: Sequence[int], slots: torch.Tensor, match: MatchResult, free_fn: FreeFn, priority: int
    ) -> int:
        """Caches the request's whole pages and frees its slots that duplicate the tree's (past
        its own match); returns how many tokens the whole pages hold."""
        if len(token_ids) != len(slots):
            raise ValueError(f"{len(token_ids)} tokens but {len(slots)} slots")
        aligned = len(token_ids) - len(token_ids) % self.page_size
        present = self.insert(token_ids[:aligned], slots[:aligned], priority)
        free_fn(slots[match.num_cached : present])
        return aligned
