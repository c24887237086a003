"""The hierarchical KV cache: the device pool's radix tree, backed by a host tier and a storage tier.

Prefixes are backed up below the device in whole blocks (`block_tokens` tokens, keyed by the
chained hash of the prefix up to the block's end, the model and the adapter: `block_keys`): into
the host tier (runtime/memory/host_pool.py) and from there to the file storage tier
(runtime/memory/page_store.py) by a writer thread (runtime/memory/storage_io.py). When a request
is admitted its prefix is matched in the device tree first; the whole blocks that follow are
taken from the host tier, else from what its prefetch read from storage while it waited, copied
into freshly allocated pool slots and inserted into the tree, so the request (and
`cached_tokens`, split per tier) sees them as cached. No disk access happens on the step.

Write policies (upstream's `--hicache-write-policy`), for copies out of the device pool:
- write_through: a request's whole blocks are backed up when it hands its KV to the tree;
- write_through_selective: a prefix's blocks are backed up once a second request reuses it;
- write_back: blocks are backed up only when their pages are evicted from the pool.
Under every policy an evicted page not backed up yet is backed up on its way out, and every
block that lands in the host tier is queued for storage (the host tier writes through).

Invariants: a block is read from slots the tree or its request holds, before they are freed;
loaded slots are owned by the tree once inserted (or freed if the tree already had them); a
block is queued for storage at most once while its write is pending; `stats` only grow.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from sglang.runtime.memory.host_pool import HostKVPool
from sglang.runtime.memory.kv_pages import KVPageIO
from sglang.runtime.memory.page_store import block_keys
from sglang.runtime.memory.radix_cache import CACHE_NAMESPACE_BITS, FreeFn, MatchResult, RadixCache, TreeNode
from sglang.runtime.memory.storage_io import BlockRef, Prefetch, StorageIO
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
    """What the lower tiers did (the tokens they served are the scheduler's `*_hit_tokens`)."""

    host_blocks: int = 0
    host_blocks_evicted: int = 0
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


class HierarchicalCache:
    def __init__(
        self,
        config: HiCacheConfig,
        cache: RadixCache,
        allocator: PagedTokenAllocator,
        io: KVPageIO,
        model_id: str,
        host: HostKVPool | None,
        storage: StorageIO | None,
        free_fn: FreeFn,
    ) -> None:
        if config.block_tokens % allocator.page_size:
            raise ValueError(f"block_tokens {config.block_tokens} is not a multiple of the page size")
        self.config = config
        self.cache = cache
        self.allocator = allocator
        self.io = io
        self.model_id = model_id
        self.host = host
        self.storage = storage
        self.free_fn = free_fn
        self.block_tokens = config.block_tokens
        self.scopes: dict[int, str] = {0: ""}  # radix namespace -> what block keys add for it
        cache.on_evict = self._on_evict

    @property
    def stats(self) -> TierStats:
        stats = TierStats()
        if self.host is not None:
            stats.host_blocks, stats.host_blocks_evicted = len(self.host), self.host.evicted
        if self.storage is not None:
            s = self.storage.store.stats
            stats.storage_blocks_written, stats.storage_blocks_read = s.blocks_written, s.blocks_read
            stats.storage_blocks_rejected, stats.storage_write_errors = s.blocks_rejected, s.write_errors
        return stats

    def details(self, loaded: Loaded) -> dict[str, int | str]:
        """A request's `cached_tokens` per tier, as upstream's `cached_tokens_details` has them
        (the storage keys only where there is a storage tier)."""
        device = loaded.match.num_cached - loaded.host_tokens - loaded.storage_tokens
        details: dict[str, int | str] = {"device": device, "host": loaded.host_tokens}
        if self.storage is not None:
            details |= {"storage": loaded.storage_tokens, "storage_backend": STORAGE_BACKEND}
        return details

    def refs(self, token_ids: Sequence[int]) -> list[BlockRef]:
        """Every whole block of `token_ids` (radix keys: a LoRA request's carry its adapter
        load's namespace), keyed by the model, the adapter's identity (`scopes`) and the plain
        token ids, so a key means the same KV across loads and restarts. No block for a
        namespace whose adapter is unknown here."""
        namespace = token_ids[0] >> CACHE_NAMESPACE_BITS if len(token_ids) else 0
        scope = self.scopes.get(namespace)
        if scope is None:
            return []
        offset = namespace << CACHE_NAMESPACE_BITS
        plain = [t - offset for t in token_ids] if offset else list(token_ids)
        b = self.block_tokens
        keys = block_keys(f"{self.model_id}{scope}", plain, b)
        return [BlockRef(k, keys[i - 1] if i else "", plain[i * b : (i + 1) * b]) for i, k in enumerate(keys)]

    def add_scope(self, namespace: int, adapter_identity: str) -> None:
        """Keys the blocks of radix namespace `namespace` by the adapter `adapter_identity`."""
        self.scopes[namespace] = f"|lora:{adapter_identity}"

    # -- backing up --------------------------------------------------------------------------
    def back_up(self, token_ids: Sequence[int], slots: torch.Tensor) -> None:
        """Copies every whole block of `token_ids` (whose KV is at `slots`) that a lower tier
        lacks out of the device, in one read; queues those storage lacks for the writer."""
        b = self.block_tokens
        missing = [
            (i, ref)
            for i, ref in enumerate(self.refs(token_ids))
            if (self.host is not None and ref.key not in self.host)
            or (self.storage is not None and not self.storage.has(ref.key))
        ]
        if not missing:
            return
        read = self.io.read(torch.cat([slots[i * b : (i + 1) * b] for i, _ in missing]))
        for (_, ref), block in zip(missing, read.split(b, dim=self.io.axis + 1)):
            if self.host is not None:
                self.host.put(ref.key, block)
            if self.storage is not None and not self.storage.has(ref.key):
                self.storage.write(ref, block.contiguous())

    def on_cached(self, token_ids: Sequence[int], slots: torch.Tensor) -> None:
        """A request hands its computed KV to the tree (write_through backs it up now)."""
        if self.config.write_policy == "write_through":
            self.back_up(token_ids, slots)

    def on_hit(self, match: MatchResult, token_ids: Sequence[int]) -> None:
        """A request was admitted reusing `match` (write_through_selective backs up reused prefixes)."""
        if self.config.write_policy == "write_through_selective" and match.last_node.hit_count >= 2:
            self.back_up(token_ids[: match.num_cached], match.slots)

    def _on_evict(self, node: TreeNode) -> None:
        tokens = self.cache.prefix_tokens(node)
        if len(tokens) < self.block_tokens:
            return
        parts, walk = [], node
        while walk is not self.cache.root:
            parts.append(walk.slots)
            walk = walk.parent
        self.back_up(tokens, torch.cat(parts[::-1]))

    # -- prefetching -------------------------------------------------------------------------
    def prefetch(self, token_ids: Sequence[int]) -> Prefetch | None:
        """Starts reading the stored blocks of a waiting request's prefix that neither the pool
        nor the host tier holds now; None without a storage tier."""
        if self.storage is None:
            return None
        refs = self.refs(token_ids)
        first = self.cache.cached_len(token_ids) // self.block_tokens
        while first < len(refs) and self.host is not None and refs[first].key in self.host:
            first += 1
        c = self.config
        timeout = c.prefetch_timeout_base + c.prefetch_timeout_per_ki_token * len(token_ids) / 1024
        return self.storage.prefetch(refs[first:], timeout)

    def ready(self, job: Prefetch | None) -> bool:
        """Whether a request with prefetch `job` may be admitted now (the prefetch policy)."""
        if job is None or job.done.is_set() or self.config.prefetch_policy == "best_effort":
            return True
        return self.config.prefetch_policy == "timeout" and time.monotonic() >= job.deadline

    def await_prefetch(self, jobs: Sequence[Prefetch | None], timeout: float) -> None:
        """Waits up to `timeout` seconds for the first of `jobs` admission is waiting on."""
        waiting = next((j for j in jobs if j is not None and not self.ready(j)), None)
        if waiting is not None:
            waiting.done.wait(timeout)

    # -- loading -----------------------------------------------------------------------------
    def load_prefix(self, token_ids: Sequence[int], match: MatchResult, job: Prefetch | None) -> Loaded:
        """Extends the device `match` of `token_ids` with the blocks that follow it in the host
        tier or in what `job` prefetched, loaded into the pool and cached in the tree (the old
        match if no tier has more, or the pool has no room). Ends `job`."""
        if job is not None:
            job.cancelled = True
        b = self.block_tokens
        refs = self.refs(token_ids)
        first = match.num_cached // b
        blocks: list[torch.Tensor] = []
        from_host: list[bool] = []
        for ref in refs[first:]:
            block = self.host.get(ref.key) if self.host is not None else None
            if block is None and job is not None:
                block = job.blocks.get(ref.key)
            if block is None:
                break
            blocks.append(block)
            from_host.append(self.host is not None and ref.key in self.host)
        if not blocks:
            return Loaded(match)
        end = (first + len(blocks)) * b
        count = end - match.num_cached
        axis = self.io.axis + 1
        # A copy: evicting room below may back blocks up into (and reuse) host rows read here.
        values = torch.cat(blocks, dim=axis).narrow(axis, match.num_cached - first * b, count)
        slots = self._allocate(match, count)
        if slots is None:
            return Loaded(match)
        self.io.write(slots, values)
        for ref, block, hosted in zip(refs[first:], blocks, from_host):
            if self.host is not None and not hosted:
                self.host.put(ref.key, block)
        present = self.cache.insert(token_ids[:end], torch.cat([match.slots, slots]))
        self.free_fn(slots[: max(present - match.num_cached, 0)])  # the tree had those already
        host_blocks = sum(from_host)
        host_tokens = host_blocks * b - (match.num_cached - first * b if from_host[0] else 0)
        loaded = Loaded(self.cache.match_prefix(token_ids[:end]), host_tokens, count - host_tokens)
        logger.info(
            "prefix of %d tokens: %d from the device pool, %d from the host tier, %d from storage",
            end,
            match.num_cached,
            loaded.host_tokens,
            loaded.storage_tokens,
        )
        return loaded

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

    def flush(self, timeout: float = SHUTDOWN_FLUSH_S) -> bool:
        """Waits for queued storage writes (True when none is left)."""
        return self.storage is None or self.storage.flush(timeout)

    def close(self, timeout: float = SHUTDOWN_FLUSH_S) -> None:
        """Shutdown: flushes queued storage writes (bounded) and stops the storage threads."""
        if self.storage is not None:
            self.storage.close(timeout)
