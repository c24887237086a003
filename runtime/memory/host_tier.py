"""The host tier of the hierarchical cache: backing radix nodes up from the device pool into
host rows, and loading host-held nodes back into the pool before a request's prefill.

Which nodes are held where is the radix tree's record (runtime/memory/tree_node.py); this class
moves the bytes (device reads and writes through `KVPageIO`, host rows through `HostKVPool`) and
makes room in the host pool by host eviction (runtime/memory/tier_eviction.py `evict_host`).

Under tensor parallelism every rank keeps its shard in host rows of its own, at the rows rank 0
chose: each copy is handed to `mirror` (runtime/memory/tier_commands.py).

Invariants: a node's `host_slots` hold exactly its tokens' KV from the moment it is backed up;
nodes being loaded (`pinned`) never lose their rows to the room a backup makes; `evicted_tokens`
only grows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from sglang.runtime.memory.host_pool import HostKVPool
from sglang.runtime.memory.kv_pages import KVPageIO
from sglang.runtime.memory.radix_cache import RadixCache
from sglang.runtime.memory.tier_commands import HostBackUp, HostLoad, TierMirror
from sglang.runtime.memory.tier_eviction import evict_host
from sglang.runtime.memory.tree_node import MatchResult, TreeNode

DeviceAlloc = Callable[[MatchResult, int], torch.Tensor | None]


class HostTier:
    def __init__(self, pool: HostKVPool, cache: RadixCache, io: KVPageIO, mirror: TierMirror | None = None) -> None:
        self.pool = pool
        self.cache = cache
        self.io = io
        self.mirror = mirror
        self.evicted_tokens = 0
        self.pinned: frozenset[int] = frozenset()  # node ids a load in progress reads from
        cache.free_host = pool.free

    def back_up(self, nodes: Sequence[TreeNode]) -> None:
        """Copies the device KV of those of `nodes` (device nodes, in prefix order) that have no
        host copy into host rows, with one device read; stops at the first node there is no room
        for (host leaves make room, least valuable first, never one of `nodes`)."""
        todo = [node for node in nodes if not node.backed_up]
        keep = self.pinned | {node.node_id for node in nodes}
        rows, fits = None, len(todo)
        while fits and rows is None:
            need = sum(len(node.key) for node in todo[:fits])
            if need > self.pool.capacity:
                fits -= 1
                continue
            short = need - self.pool.available_tokens
            if short > 0:
                self.evicted_tokens += evict_host(self.cache, short, frozenset(keep))
            rows = self.pool.alloc(need)
            fits = fits if rows is not None else fits - 1
        if rows is None:
            return
        todo = todo[:fits]
        slots = torch.cat([node.slots for node in todo])
        if self.mirror is not None:
            self.mirror(HostBackUp(slots, rows))
        self.pool.write(rows, self.io.read(slots))
        for node, part in zip(todo, rows.split([len(node.key) for node in todo])):
            node.host_slots = part
            self.cache.host_leaves.push(node)

    def load(self, match: MatchResult, allocate: DeviceAlloc) -> MatchResult:
        """`match` extended by its host-held nodes, loaded into device slots from `allocate`
        (which may evict other device nodes, never these) and on the device from now on; `match`
        itself when there are none or the pool has no room."""
        if not match.host_nodes:
            return match
        self.pinned = frozenset(node.node_id for node in match.host_nodes)
        try:
            slots = allocate(match, match.host_tokens)
        finally:
            self.pinned = frozenset()
        if slots is None:
            return match
        rows = torch.cat([node.host_slots for node in match.host_nodes])
        if self.mirror is not None:
            self.mirror(HostLoad(rows, slots))
        self.io.write(slots, self.pool.read(rows))
        for node, part in zip(match.host_nodes, slots.split([len(node.key) for node in match.host_nodes])):
            self.cache.revive(node, part)
        return MatchResult(torch.cat([match.slots, slots]), match.host_nodes[-1])
