"""The host tier's eviction order without walking the tree: a lazily validated heap of the nodes
that hold host rows, keyed by the tree's eviction policy (runtime/memory/eviction.py).

Entries are pushed when a node may have become a host-evictable leaf (backed up, split, a child
left the host tier) and whenever a match or insert touches a backed-up node; they are checked
only when popped. A popped entry whose key is below the node's current key (it grew since:
lru, lfu, priority, slru) goes back with the current key; one above it (mru's key falls on a
touch) was superseded by the entry that touch pushed, and is dropped; one whose node holds no
host rows any more is dropped. So a pop costs O(log n) amortised, where a scan of every node
cost O(n) per eviction.

Invariants: every node that holds host rows has an entry whose key is at most its current key,
or equal to it where the key can fall (touches push); the heap holds at most `2 * live + slack`
entries after each push (older entries are compacted away).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sglang.runtime.memory.eviction import Policy
    from sglang.runtime.memory.tree_node import TreeNode

COMPACT_SLACK = 1024
"""Entries the heap may hold beyond twice its live nodes before it is compacted."""


class LeafQueue:
    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self._heap: list[tuple[tuple[int, ...], int, TreeNode]] = []
        self._limit = COMPACT_SLACK

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, node: TreeNode) -> None:
        """Files `node` with its current key if it holds host rows (else it is no candidate)."""
        if not node.backed_up:
            return
        heapq.heappush(self._heap, (self.policy(node), node.node_id, node))
        if len(self._heap) > self._limit:
            self._compact()

    def pop(self, evictable: Callable[[TreeNode], bool]) -> TreeNode | None:
        """The node first in the policy's order among those `evictable` accepts (taken out of
        the queue), or None. Backed-up nodes it refuses are dropped: whatever makes one
        evictable again pushes it."""
        while self._heap:
            key, _, node = heapq.heappop(self._heap)
            if not node.backed_up or not evictable(node):
                continue
            current = self.policy(node)
            if current == key:
                return node
            if current > key:
                self.push(node)
        return None

    def _compact(self) -> None:
        """One entry per node still holding host rows, with its current key."""
        live = {node.node_id: node for _, _, node in self._heap if node.backed_up}
        self._heap = [(self.policy(node), node_id, node) for node_id, node in live.items()]
        heapq.heapify(self._heap)
        self._limit = 2 * len(self._heap) + COMPACT_SLACK
