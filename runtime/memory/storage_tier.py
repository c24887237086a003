"""The storage tier of the hierarchical cache, as the scheduler's thread sees it: which blocks a
token sequence has (keys by model, adapter and tokens), backing blocks up from the device pool,
and the prefetch of a waiting request's stored blocks under upstream's
`--hicache-storage-prefetch-policy` (the disk traffic itself is runtime/memory/storage_io.py's).

A block is `block_tokens` consecutive tokens starting at a multiple of `block_tokens`; its key
chains the keys before it (runtime/memory/page_store.py `block_keys`), so it names the whole
prefix up to its end: the storage tier keeps whole blocks, while the tree and the host tier keep
pages.

Under tensor parallelism rank 0's tier hands each decision to its `mirror` (the other ranks'
tiers replay it on their shards: runtime/memory/tier_commands.py), and a load uses only the
leading blocks every rank read intact (`agree`).

Invariants: a key means the same KV across adapter loads and restarts (`scopes` maps a radix
namespace to its adapter's identity); a block is queued for writing at most once while its write
is pending; a prefetch is always ended by `take` (its blocks stop counting against the bound),
and with a mirror every prefetch started is ended on the other ranks too (`agree` or `cancel`).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from sglang.runtime.distributed.group import tp_group
from sglang.runtime.memory.kv_pages import KVPageIO
from sglang.runtime.memory.page_store import block_keys
from sglang.runtime.memory.radix_cache import CACHE_NAMESPACE_BITS
from sglang.runtime.memory.storage_io import BlockRef, Prefetch, StorageIO
from sglang.runtime.memory.tier_commands import AddScope, LoadBlocks, StartPrefetch, StoreBlocks, TierMirror

if TYPE_CHECKING:
    from sglang.runtime.memory.hicache_setup import HiCacheConfig


class StorageTier:
    def __init__(
        self, config: HiCacheConfig, io: StorageIO, kv: KVPageIO, model_id: str, mirror: TierMirror | None = None
    ) -> None:
        self.config = config
        self.io = io
        self.kv = kv
        self.model_id = model_id
        self.block_tokens = config.block_tokens
        self.scopes: dict[int, str] = {0: ""}  # radix namespace -> what block keys add for it
        self.mirror = mirror
        self._job_ids = itertools.count(1)

    def add_scope(self, namespace: int, adapter_identity: str) -> None:
        """Keys the blocks of radix namespace `namespace` by the adapter `adapter_identity`."""
        if self.mirror is not None:
            self.mirror(AddScope(namespace, adapter_identity))
        self.scopes[namespace] = f"|lora:{adapter_identity}"

    def refs(self, token_ids: Sequence[int]) -> list[BlockRef]:
        """Every whole block of `token_ids` (radix keys: a LoRA request's carry its adapter
        load's namespace), keyed by the model, the adapter's identity and the plain token ids.
        No block for a namespace whose adapter is unknown here."""
        namespace = token_ids[0] >> CACHE_NAMESPACE_BITS if len(token_ids) else 0
        scope = self.scopes.get(namespace)
        if scope is None:
            return []
        offset = namespace << CACHE_NAMESPACE_BITS
        plain = [t - offset for t in token_ids] if offset else list(token_ids)
        b = self.block_tokens
        keys = block_keys(f"{self.model_id}{scope}", plain, b)
        return [BlockRef(k, keys[i - 1] if i else "", plain[i * b : (i + 1) * b]) for i, k in enumerate(keys)]

    def back_up(self, token_ids: Sequence[int], slots: torch.Tensor) -> None:
        """Queues every whole block of `token_ids` (KV at device `slots`) that storage lacks, off
        the device in one read that is only started here: the writer thread waits for it."""
        if self.mirror is not None:
            self.mirror(StoreBlocks(tuple(token_ids), slots))
        b = self.block_tokens
        missing = [(i, ref) for i, ref in enumerate(self.refs(token_ids)) if not self.io.has(ref.key)]
        if not missing:
            return
        read = self.kv.read_async(torch.cat([slots[i * b : (i + 1) * b] for i, _ in missing]))
        axis = self.kv.axis + 1
        for n, (_, ref) in enumerate(missing):
            self.io.write(ref, lambda n=n: read.wait().narrow(axis, n * b, b).contiguous())

    def prefetch(self, token_ids: Sequence[int], cached: int) -> Prefetch:
        """Starts reading the stored blocks of `token_ids` after its first `cached` tokens (what
        the tree holds now, in the pool or the host tier)."""
        c = self.config
        timeout = c.prefetch_timeout_base + c.prefetch_timeout_per_ki_token * len(token_ids) / 1024
        job = self.io.prefetch(self.refs(token_ids)[cached // self.block_tokens :], timeout)
        if self.mirror is not None:
            job.id = next(self._job_ids)
            self.mirror(StartPrefetch(job.id, tuple(token_ids), cached))
        return job

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

    def take(self, token_ids: Sequence[int], cached: int, job: Prefetch | None) -> list[torch.Tensor]:
        """Ends `job`; the blocks it read that continue `token_ids` after its first `cached`
        tokens, in order (the first may start before `cached`: blocks are whole)."""
        blocks = self.io.finish(job) if job is not None else {}
        found = []
        for ref in self.refs(token_ids)[cached // self.block_tokens :]:
            if ref.key not in blocks:
                break
            found.append(blocks[ref.key])
        return found

    def cancel(self, job: Prefetch) -> None:
        """Ends the prefetch of a request that finished while it waited (on every rank)."""
        self.io.finish(job)
        if self.mirror is not None:
            self.mirror(LoadBlocks(job.id, (), 0, 0, None))

    def agree(
        self,
        job: Prefetch | None,
        token_ids: Sequence[int],
        cached: int,
        blocks: list[torch.Tensor],
        slots: torch.Tensor | None,
    ) -> list[torch.Tensor]:
        """The leading ones of `blocks` (what `take` gave for `job`) that every rank holds, to be
        loaded at `slots` (None: nothing is loaded); all of them without a mirror. With one, the
        other ranks end their `job` too, and each keeps as many of its own blocks."""
        if self.mirror is None or job is None:
            return blocks
        self.mirror(LoadBlocks(job.id, tuple(token_ids), cached, len(blocks), slots))
        return blocks[: tp_group().agree_min(len(blocks))] if slots is not None else []

    def values(self, blocks: list[torch.Tensor], cached: int) -> torch.Tensor:
        """The KV of the tokens from `cached` to the end of `blocks`, which start with the block
        holding token `cached`."""
        b = self.block_tokens
        first = cached // b
        axis = self.kv.axis + 1
        return torch.cat(blocks, dim=axis).narrow(axis, cached - first * b, (first + len(blocks)) * b - cached)
