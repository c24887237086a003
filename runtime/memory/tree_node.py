"""One node of the radix tree (runtime/memory/radix_cache.py) and the result of a prefix match.

A node's edge is a run of tokens; a node records which tiers hold those tokens' KV:
- `slots`: pool slots on the device (None once the node was evicted from the device pool);
- `host_slots`: rows of the host tier (runtime/memory/host_pool.py; None when not backed up).

Invariants (kept by the tree and the hierarchical cache):
- A node holds its KV somewhere: `slots` or `host_slots` is set (the root holds nothing).
- `len(key) == len(slots) == len(host_slots)` for whichever is set.
- Device nodes form the top of the tree: the parent of a device node is a device node (or the
  root), so a device-evicted (`on_host`) node only has device-evicted descendants, and a match
  walks the device tier first and then the host tier.
- `lock_ref` is only ever positive on device nodes (requests lock the KV they attend to).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


def empty_slots() -> torch.Tensor:
    return torch.empty(0, dtype=torch.int64)


@dataclass(eq=False)
class TreeNode:
    """One edge of the tree and the node it leads to."""

    key: list[int]
    slots: torch.Tensor | None
    parent: TreeNode | None
    node_id: int
    children: dict[int | tuple[int, ...], TreeNode] = field(default_factory=dict)
    host_slots: torch.Tensor | None = None
    lock_ref: int = 0
    last_access: int = 0
    created: int = 0
    hit_count: int = 0  # requests admitted with this node in their cached prefix
    priority: int = 0  # highest priority of the requests that cached or reused it

    @property
    def on_device(self) -> bool:
        return self.slots is not None

    @property
    def on_host(self) -> bool:
        """Held by the host tier only: evicted from the device pool, backed up below it."""
        return self.slots is None and self.host_slots is not None

    @property
    def backed_up(self) -> bool:
        return self.host_slots is not None

    def is_device_leaf(self) -> bool:
        """On the device with no child on the device: the device tier can evict it next."""
        return self.on_device and not any(child.on_device for child in self.children.values())

    def is_host_leaf(self) -> bool:
        """Backed up with no child that lives on the host tier alone: the host tier can drop its
        copy next (and the node with it, when it is not on the device either)."""
        return self.backed_up and not any(child.on_host for child in self.children.values())


@dataclass(frozen=True)
class MatchResult:
    """The cached prefix of a query in the device pool: its slots, the node to lock while they
    are used; and the device-evicted nodes after it whose KV the host tier holds (`host_nodes`,
    in prefix order, `host_tokens` tokens): a hierarchical cache loads them before prefill."""

    slots: torch.Tensor
    last_node: TreeNode
    host_nodes: tuple[TreeNode, ...] = ()

    @property
    def num_cached(self) -> int:
        return self.slots.numel()

    @property
    def host_tokens(self) -> int:
        return sum(len(node.key) for node in self.host_nodes)
