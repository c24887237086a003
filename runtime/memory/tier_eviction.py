"""Eviction from each tier of the radix tree: device slots first, host rows when the host tier
needs room. Which node goes first is the tree's policy (runtime/memory/eviction.py), ties broken
by creation order, so eviction is deterministic.

Device eviction takes unlocked device leaves (runtime/memory/tree_node.py `is_device_leaf`).
The tree's `on_evict` hook sees each one first and may back it up; a leaf that is backed up then
stays in the tree, held by the host tier; one that is not goes, with its host-held subtree
(whose rows go back to the host pool: without the node, nothing could reach them).

Host eviction takes host leaves (`is_host_leaf`), in the order the tree's host queue keeps
(runtime/memory/leaf_queue.py) rather than by a walk of every node: a node still on the device just loses its host
copy; a node the host tier alone held leaves the tree. Locks do not matter there: requests only
lock device KV.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import torch

from sglang.runtime.memory.tree_node import TreeNode

if TYPE_CHECKING:
    from sglang.runtime.memory.radix_cache import RadixCache

FreeFn = Callable[[torch.Tensor], None]
Heap = list[tuple[tuple[int, ...], int, TreeNode]]


def _heap(cache: RadixCache, nodes: Iterable[TreeNode]) -> Heap:
    heap = [(cache.policy(n), n.node_id, n) for n in nodes]
    heapq.heapify(heap)
    return heap


def _push(cache: RadixCache, heap: Heap, node: TreeNode) -> None:
    heapq.heappush(heap, (cache.policy(node), node.node_id, node))


def evict_device(cache: RadixCache, num_tokens: int, free_fn: FreeFn) -> int:
    """Evicts unlocked device leaves until at least `num_tokens` device tokens are gone or none
    is left; frees their slots with `free_fn`; returns the tokens evicted."""
    heap = _heap(cache, (n for n in cache.nodes() if n.lock_ref == 0 and n.is_device_leaf()))
    evicted: list[torch.Tensor] = []
    count = 0
    while count < num_tokens and heap:
        _, _, node = heapq.heappop(heap)
        if cache.on_evict is not None:
            cache.on_evict(node)
        evicted.append(node.slots)
        count += len(node.key)
        cache._evictable -= len(node.key)
        parent = node.parent
        if node.backed_up:
            node.slots = None
        else:
            drop_subtree(cache, node)
        if parent is not cache.root and parent.lock_ref == 0 and parent.is_device_leaf():
            _push(cache, heap, parent)
    if evicted:
        free_fn(torch.cat(evicted))
    return count


def evict_host(cache: RadixCache, num_tokens: int, keep: frozenset[int] = frozenset()) -> int:
    """Drops host copies of host leaves (never of nodes whose `node_id` is in `keep`) until at
    least `num_tokens` host rows are free again or none is left; returns the rows freed. The
    leaves come from the tree's queue (runtime/memory/leaf_queue.py), not a walk of the tree."""
    freed: list[torch.Tensor] = []
    kept: list[TreeNode] = []
    count = 0
    while count < num_tokens and (node := cache.host_leaves.pop(TreeNode.is_host_leaf)) is not None:
        if node.node_id in keep:
            kept.append(node)
            continue
        freed.append(node.host_slots)
        count += len(node.key)
        node.host_slots = None
        parent = node.parent
        if not node.on_device:
            del parent.children[cache.child_key(node.key)]
            cache.host_leaves.push(parent)
    for node in kept:
        cache.host_leaves.push(node)
    if freed and cache.free_host is not None:
        cache.free_host(torch.cat(freed))
    return count


def drop_subtree(cache: RadixCache, node: TreeNode) -> None:
    """Takes `node` (off the device by now or about to be) and its descendants, all held by the
    host tier alone, out of the tree, handing their host rows back."""
    del node.parent.children[cache.child_key(node.key)]
    rows, stack = [], [node]
    while stack:
        walk = stack.pop()
        if walk.host_slots is not None:
            rows.append(walk.host_slots)
            walk.host_slots = None  # its entries in the host queue are dropped when popped
        stack.extend(walk.children.values())
    if rows and cache.free_host is not None:
        cache.free_host(torch.cat(rows))
