"""Which unlocked leaf of the radix tree is evicted first: upstream's `--radix-eviction-policy`.

A policy maps a node to a sort key; the leaf with the smallest key goes first, ties broken by
node creation order (`node_id`) so that eviction is deterministic. Every time stamp is the
tree's logical clock, which ticks once per match or insert, so two runs of the same request
sequence evict the same nodes.

The set is upstream SGLang's (its strategy registry: lru, lfu, fifo, mru, filo, priority,
slru); upstream's CLI lists lru, lfu, slru and priority, and fifo is the issue's ask, so the
flag takes all of them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sglang.runtime.memory.tree_node import TreeNode

SortKey = tuple[int, ...]
Policy = Callable[["TreeNode"], SortKey]

SLRU_PROTECTED_HITS = 2
"""Hits after which an slru node leaves the probationary segment (upstream's default)."""


def _lru(node: TreeNode) -> SortKey:
    return (node.last_access,)


def _lfu(node: TreeNode) -> SortKey:
    # Least hit first; among equally hit nodes, least recently used.
    return (node.hit_count, node.last_access)


def _fifo(node: TreeNode) -> SortKey:
    return (node.created,)


def _mru(node: TreeNode) -> SortKey:
    return (-node.last_access,)


def _filo(node: TreeNode) -> SortKey:
    return (-node.created,)


def _priority(node: TreeNode) -> SortKey:
    # Lowest request priority first (a node carries the highest priority of the requests that
    # cached or reused it), LRU within one priority.
    return (node.priority, node.last_access)


def _slru(node: TreeNode) -> SortKey:
    # Probationary nodes (few hits) go before protected ones, LRU within each segment.
    return (int(node.hit_count >= SLRU_PROTECTED_HITS), node.last_access)


POLICIES: dict[str, Policy] = {
    "lru": _lru,
    "lfu": _lfu,
    "fifo": _fifo,
    "mru": _mru,
    "filo": _filo,
    "priority": _priority,
    "slru": _slru,
}
"""`--radix-eviction-policy` choices, the default (lru) first."""


def eviction_policy(name: str) -> Policy:
    """The policy called `name`; an unknown name is a ValueError listing the known ones."""
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown radix eviction policy {name!r}; choose one of {', '.join(POLICIES)}") from None
