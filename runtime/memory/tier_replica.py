"""A tensor-parallel follower's lower tiers: its own host rows and storage folder for its shard of
the KV, moved as rank 0's tier commands say (runtime/memory/tier_commands.py).

A follower has no radix tree: rank 0's commands carry the pool slots and host rows, and the
token ids a storage key is computed from (each rank keys its blocks by its own identity). Its
storage tier runs the same reader and writer threads as rank 0's, so a prefetch reads this rank's
files while the request waits on rank 0.

Invariants: commands are applied in the order rank 0 sent them; every prefetch started here is
ended by the `LoadBlocks` rank 0 sends for it; a `LoadBlocks` with slots takes part in the ranks'
agreement (an all-gather) whatever this rank read, so no collective is ever left unmatched.
"""

from __future__ import annotations

import logging
import time

from sglang.runtime.distributed.group import tp_group
from sglang.runtime.memory.hicache_setup import LowerTiers, build_lower_tiers
from sglang.runtime.memory.hierarchical_cache import SHUTDOWN_FLUSH_S
from sglang.runtime.memory.storage_io import Prefetch
from sglang.runtime.memory.tier_commands import (
    AddScope,
    BuildTiers,
    HostBackUp,
    HostLoad,
    LoadBlocks,
    StartPrefetch,
    StoreBlocks,
    TierCommand,
)

logger = logging.getLogger(__name__)

CATCH_UP_S = 5.0
"""How long a load waits for this rank's read of blocks rank 0 already has; past it, the ranks
agree on what this rank has, and the rest is recomputed."""
CATCH_UP_POLL_S = 0.002


class TierReplica:
    def __init__(self, runner: object) -> None:
        self.runner = runner
        self.tiers: LowerTiers | None = None
        self.jobs: dict[int, Prefetch] = {}

    def apply(self, command: TierCommand) -> None:
        match command:
            case BuildTiers(config, host_tokens, max_blocks):
                self.tiers = build_lower_tiers(config, self.runner, host_tokens, max_blocks)
            case HostBackUp(slots, rows):
                self._tiers.host.write(rows, self._tiers.kv.read(slots))
            case HostLoad(rows, slots):
                self._tiers.kv.write(slots, self._tiers.host.read(rows))
            case StoreBlocks(token_ids, slots):
                self._tiers.storage.back_up(token_ids, slots)
            case StartPrefetch(job, token_ids, cached):
                self.jobs[job] = self._tiers.storage.prefetch(token_ids, cached)
            case LoadBlocks():
                self._load(command)
            case AddScope(namespace, adapter_identity):
                self._tiers.storage.add_scope(namespace, adapter_identity)

    @property
    def _tiers(self) -> LowerTiers:
        if self.tiers is None:
            raise RuntimeError("a tier command came before BuildTiers")
        return self.tiers

    def _load(self, command: LoadBlocks) -> None:
        storage = self._tiers.storage
        job = self.jobs.pop(command.job)
        if command.slots is None:
            storage.io.finish(job)
            return
        deadline = time.monotonic() + CATCH_UP_S
        while len(job.blocks) < command.blocks and not job.done.wait(CATCH_UP_POLL_S):
            if time.monotonic() > deadline:
                logger.warning("storage tier: rank %d read too slowly; its prefix is recomputed", tp_group().rank)
                break
        blocks = storage.take(command.token_ids, command.cached, job)[: command.blocks]
        agreed = tp_group().agree_min(len(blocks))
        if agreed:
            values = storage.values(blocks[:agreed], command.cached)
            self._tiers.kv.write(command.slots[: values.shape[storage.kv.axis + 1]], values)

    def close(self) -> None:
        """Shutdown: this rank's queued storage writes are flushed (bounded)."""
        if self.tiers is not None and self.tiers.storage is not None:
            self.tiers.storage.io.close(SHUTDOWN_FLUSH_S)
