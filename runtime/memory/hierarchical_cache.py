"""The hierarchical KV cache: the device pool's radix tree, backed by a host tier and a storage tier.

The radix tree records, per node, whether the device pool and/or the host tier hold its tokens'
KV (runtime/memory/tree_node.py); the host tier (runtime/memory/host_tier.py) moves nodes between
the two. Below them, the file storage tier (runtime/memory/storage_tier.py) keeps whole blocks
keyed by model, adapter and tokens, across evictions from the tree and across restarts.

When a request is admitted, its prefix is matched in the tree: the device nodes first, then the
host-held nodes after them, which are loaded into freshly allocated pool slots; then the stored
blocks that follow, from what its prefetch read while it waited. The request (and
`cached_tokens`, split per tier) sees all of it as cached. No disk access happens on the step.

Write policies (upstream's `--hicache-write-policy`), for copies out of the device pool:
- write_through: a request's KV is backed up when it hands it to the tree;
- write_through_selective: a prefix is backed up once a second request reuses it;
- write_back: nodes are backed up only when they are evicted from the pool.
Under every policy a node evicted from the pool is backed up on its way out (host tier: the node,
storage: the whole blocks of its prefix), if there is room.

Invariants: KV is read from slots the tree or its request holds, before they are freed; loaded
slots are owned by the tree once inserted (or freed if the tree already had them); every prefetch
is ended (`take`) when its request is admitted or finishes; the stats' counters only grow.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from sglang.runtime.memory.host_tier import HostTier
from sglang.runtime.memory.radix_cache import FreeFn, MatchResult, RadixCache, TreeNode
from sglang.runtime.memory.storage_io import Prefetch
from sglang.runtime.memory.storage_tier import StorageTier
from sglang.runtime.memory.token_allocator import PagedTokenAllocator

if TYPE_CHECKING:
    from sglang.runtime.memory.hicache_setup import HiCacheConfig

logger = logging.getLogger(__name__)

STORAGE_BACKEND = "file"
"""The one `--hicache-storage-backend` there is."""
SHUTDOWN_FLUSH_S = 4.0
"""How long shutdown waits for queued storage writes: inside the 5 s the engine gives its children
between SIGTERM and SIGKILL (runtime/processes/launch.py)."""


@dataclass
class TierStats:
    """What the lower tiers hold and did (the tokens they served are the scheduler's
    `<tier>_hit_tokens`)."""

    host_tokens: int = 0
    """Tokens the host tier holds now."""
    host_tokens_evicted: int = 0
    storage_blocks_written: int = 0
    storage_blocks_read: int = 0
    storage_blocks_rejected: int = 0
    storage_write_errors: int = 0


@dataclass(frozen=True)
class Loaded:
    """A request's cached prefix after loading, and how many of its tokens came from each tier."""

    match: MatchResult
    host_tokens: int = 0
    storage_tokens: int = 0

    @property
    def device_tokens(self) -> int:
        return self.match.num_cached - self.host_tokens - self.storage_tokens


class HierarchicalCache:
    def __init__(
        self,
        config: HiCacheConfig,
        cache: RadixCache,
        allocator: PagedTokenAllocator,
        host: HostTier | None,
        storage: StorageTier | None,
        free_fn: FreeFn,
    ) -> None:
        if config.block_tokens % allocator.page_size:
            raise ValueError(f"block_tokens {config.block_tokens} is not a multiple of the page size")
        self.config = config
        self.cache = cache
        self.allocator = allocator
        self.host = host
        self.storage = storage
        self.free_fn = free_fn
        cache.on_evict = self._on_evict

    @property
    def stats(self) -> TierStats:
        stats = TierStats()
        if self.host is not None:
            stats.host_tokens, stats.host_tokens_evicted = self.host.pool.used_tokens, self.host.evicted_tokens
        if self.storage is not None:
            s = self.storage.io.store.stats
            stats.storage_blocks_written, stats.storage_blocks_read = s.blocks_written, s.blocks_read
            stats.storage_blocks_rejected, stats.storage_write_errors = s.blocks_rejected, s.write_errors
        return stats

    def details(self, loaded: Loaded) -> dict[str, int | str]:
        """A request's `cached_tokens` per tier, as upstream's `cached_tokens_details` has them
        (the storage keys only where there is a storage tier)."""
        details: dict[str, int | str] = {"device": loaded.device_tokens, "host": loaded.host_tokens}
        if self.storage is not None:
            details |= {"storage": loaded.storage_tokens, "storage_backend": STORAGE_BACKEND}
        return details

    def add_scope(self, namespace: int, adapter_identity: str) -> None:
        if self.storage is not None:
            self.storage.add_scope(namespace, adapter_identity)

    # -- backing up --------------------------------------------------------------------------
    def on_cached(self, token_ids: Sequence[int]) -> None:
        """A request handed the KV of `token_ids` to the tree (write_through backs it up now)."""
        if self.config.write_policy == "write_through":
            self._back_up(self.cache.match_prefix(token_ids))

    def on_hit(self, match: MatchResult) -> None:
        """A request was admitted reusing `match` (write_through_selective backs up reused prefixes)."""
        if self.config.write_policy == "write_through_selective" and match.last_node.hit_count >= 2:
            self._back_up(match)

    def _back_up(self, match: MatchResult) -> None:
        """Backs up the device prefix of `match` in every lower tier that lacks it."""
        if self.host is not None:
            self.host.back_up(self._path(match.last_node))
        if self.storage is not None:
            self.storage.back_up(self.cache.prefix_tokens(match.last_node), match.slots)

    def _on_evict(self, node: TreeNode) -> None:
        if self.host is not None:
            self.host.back_up([node])
        if self.storage is not None and len(tokens := self.cache.prefix_tokens(node)) >= self.config.block_tokens:
            self.storage.back_up(tokens, self.cache.path_slots(node))

    def _path(self, node: TreeNode) -> list[TreeNode]:
        path = []
        while node is not self.cache.root:
            path.append(node)
            node = node.parent
        return path[::-1]

    # -- prefetching -------------------------------------------------------------------------
    def prefetch(self, token_ids: Sequence[int]) -> Prefetch | None:
        """Starts reading the stored blocks of a waiting request's prefix that neither the pool
        nor the host tier holds now; None without a storage tier."""
        if self.storage is None:
            return None
        return self.storage.prefetch(token_ids, self.cache.cached_len(token_ids, with_host=True))

    def ready(self, job: Prefetch | None) -> bool:
        return self.storage is None or self.storage.ready(job)

    def await_prefetch(self, jobs: Sequence[Prefetch | None], timeout: float) -> None:
        if self.storage is not None:
            self.storage.await_prefetch(jobs, timeout)

    def cancel(self, job: Prefetch) -> None:
        """Ends the prefetch of a request that finished while it waited."""
        if self.storage is not None:
            self.storage.cancel(job)

    # -- loading -----------------------------------------------------------------------------
    def load_prefix(self, token_ids: Sequence[int], match: MatchResult, job: Prefetch | None) -> Loaded:
        """Extends the tree's `match` of `token_ids` by its host-held nodes and then by the
        blocks `job` read from storage after them, loaded into the pool and cached in the tree
        (as far as the pool has room). Ends `job`."""
        device = match.num_cached
        if self.host is not None:
            match = self.host.load(match, self._allocate)
        host_tokens = match.num_cached - device
        loaded = Loaded(match, host_tokens)
        if self.storage is not None:
            loaded = self._load_blocks(token_ids, match, job, host_tokens)
        if loaded.host_tokens or loaded.storage_tokens:
            logger.info(
                "prefix of %d tokens: %d from the device pool, %d from the host tier, %d from storage",
                loaded.match.num_cached,
                loaded.device_tokens,
                loaded.host_tokens,
                loaded.storage_tokens,
            )
        return loaded

    def _load_blocks(
        self, token_ids: Sequence[int], match: MatchResult, job: Prefetch | None, host_tokens: int
    ) -> Loaded:
        """`match` extended by the stored blocks `job` read that follow it (the first may overlap
        it), as far as the pool has room and every rank holds them. Ends `job`."""
        storage = self.storage
        cached = match.num_cached
        blocks = storage.take(token_ids, cached, job)
        b = self.config.block_tokens
        end = (cached // b + len(blocks)) * b
        slots = self._allocate(match, end - cached) if blocks else None
        agreed = storage.agree(job, token_ids, cached, blocks, slots)
        if slots is None or not agreed:
            if slots is not None:
                self.free_fn(slots)
            return Loaded(match, host_tokens)
        if len(agreed) < len(blocks):  # another rank lacks some of them: those are recomputed
            end = (cached // b + len(agreed)) * b
            self.free_fn(slots[end - cached :])
            slots = slots[: end - cached]
        storage.kv.write(slots, storage.values(agreed, cached))
        present = self.cache.insert(token_ids[:end], torch.cat([match.slots, slots]))
        self.free_fn(slots[: max(present - cached, 0)])  # the tree had those already
        return Loaded(self.cache.match_prefix(token_ids[:end]), host_tokens, end - cached)

    def _allocate(self, match: MatchResult, count: int) -> torch.Tensor | None:
        """Pool slots for `count` tokens after `match`, evicting other cached prefixes (never
        the match itself) when the free pages do not suffice."""
        last = int(match.slots[-1]) if match.num_cached else None
        short = self.allocator.pages_needed([last], [count]) - self.allocator.num_free_pages
        if short > 0:
            self.cache.inc_lock_ref(match.last_node)
            self.cache.evict(short * self.allocator.page_size, self.free_fn)
            self.cache.dec_lock_ref(match.last_node)
        return self.allocator.alloc_extend(last, count)

    def flush_device(self) -> None:
        """Empties the device tier: every node leaves the pool, backed up below it where there
        is room (as any eviction does)."""
        self.cache.evict(self.cache.total_size(), self.free_fn)

    def flush(self, timeout: float = SHUTDOWN_FLUSH_S) -> bool:
        """Waits for queued storage writes (True when none is left)."""
        return self.storage is None or self.storage.io.flush(timeout)

    def close(self, timeout: float = SHUTDOWN_FLUSH_S) -> None:
        """Shutdown: flushes queued storage writes (bounded) and stops the storage threads."""
        if self.storage is not None:
            self.storage.io.close(timeout)
