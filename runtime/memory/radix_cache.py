"""RadixAttention's prefix cache: which token prefixes have their KV cached, and in which tier.

A radix tree over token ids. Each node's edge holds a run of tokens and where their KV is: pool
slots on the device and/or rows of the host tier (runtime/memory/tree_node.py). The path from
the root to a node spells a prefix whose device KV lives at the concatenation of the slots along
the path. The tree says what is cached; the allocator (runtime/memory/token_allocator.py) says
which slots are free, the host pool (runtime/memory/host_pool.py) which rows.

Invariants:
- Every edge is a whole number of pages: keys are truncated to a multiple of `page_size`, so
  sharing a prefix shares whole pages and no page is split between the tree and a request.
- The children of a node differ in their first page (their first token when `page_size == 1`).
- Each slot in the tree is held by exactly one node. The tree owns it until eviction hands it
  to `free_fn`; slots a request allocated itself stay the request's until it hands them over.
- `lock_ref` of a node counts the requests using it or a descendant (locking a node locks its
  ancestors); locked nodes are never evicted. `protected_size()` counts device tokens on locked
  nodes, `evictable_size()` those on unlocked ones; `total_size()` is their sum. Tokens held
  by the host tier alone count in none of them.
- Device eviction (runtime/memory/tier_eviction.py) takes unlocked device leaves in the order
  of the eviction policy (runtime/memory/eviction.py; LRU by default: matching and inserting
  touch every node on the path). An `on_evict` hook sees each leaf before its slots are freed
  (a hierarchical cache backs it up there); a leaf backed up by then stays in the tree, held
  by the host tier, else it goes with its subtree.
- A match walks the device tier, then the host tier (`MatchResult.host_nodes`); an insert that
  walks into host-held nodes gives them the inserted slots, so they are on the device again.

A request's life (the scheduler's side):
    match = cache.match_prefix(prompt[:-1])    # keep one token to compute; num_cached is reported
    cache.inc_lock_ref(match.last_node)        # its prefix must survive while it runs
    new = allocator.alloc_extend(last slot of match.slots or None, len(prompt) - match.num_cached)
    slots = cat(match.slots, new)              # grows as it decodes
    match, slots = cache.cache_unfinished(tokens, slots, match, free)   # optional (chunked prefill)
    cache.cache_finished(tokens, slots, match, free)    # or: free(slots[num_cached:]) and unlock
(runtime/memory/request_handover.py). With `disable=True` nothing is cached: matches are empty
and finished requests free everything.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import torch

from sglang.runtime.memory import tier_eviction
from sglang.runtime.memory.eviction import eviction_policy
from sglang.runtime.memory.leaf_queue import LeafQueue
from sglang.runtime.memory.request_handover import RequestHandover
from sglang.runtime.memory.tree_node import MatchResult, TreeNode, empty_slots

FreeFn = Callable[[torch.Tensor], None]

CACHE_NAMESPACE_BITS = 40
"""Keys of a namespace (a LoRA adapter load) are token ids plus `namespace << 40`: token ids are
far below `2**40`, so namespaced keys never collide with another namespace's."""

__all__ = ["CACHE_NAMESPACE_BITS", "FreeFn", "MatchResult", "RadixCache", "TreeNode"]


class RadixCache(RequestHandover):
    """The prefix tree; with `disable=True` the same interface caches nothing."""

    def __init__(
        self,
        page_size: int = 1,
        disable: bool = False,
        eviction: str = "lru",
        on_evict: Callable[[TreeNode], None] | None = None,
        free_host: FreeFn | None = None,
    ) -> None:
        """`on_evict`: sees each device leaf before eviction (and may back it up);
        `free_host`: takes back the host rows of nodes the tree drops."""
        if page_size < 1:
            raise ValueError(f"page_size must be at least 1, got {page_size}")
        self.page_size = page_size
        self.disable = disable
        self.policy = eviction_policy(eviction)
        self.on_evict = on_evict
        self.free_host = free_host
        self.reset()

    def reset(self) -> None:
        """Forgets everything without freeing slots or rows: the caller clears their pools too."""
        self._ids = itertools.count()
        self._clock = 0  # a logical clock: deterministic LRU order, no ties along one path
        self.root = TreeNode(key=[], slots=empty_slots(), parent=None, node_id=next(self._ids))
        self.root.lock_ref = 1  # never evicted, and lock walks stop at it
        self.host_leaves = LeafQueue(self.policy)  # host eviction's order (runtime/memory/leaf_queue.py)
        self._evictable = 0
        self._protected = 0

    def evictable_size(self) -> int:
        return self._evictable

    def protected_size(self) -> int:
        return self._protected

    def total_size(self) -> int:
        return self._evictable + self._protected

    def match_prefix(self, token_ids: Sequence[int]) -> MatchResult:
        """The longest cached whole-page prefix of `token_ids`: in the device pool, then held by
        the host tier alone. An edge the match ends inside is split, so that the nodes cover
        exactly the matched prefix."""
        if self.disable:
            return MatchResult(empty_slots(), self.root)
        key = list(token_ids[: len(token_ids) - len(token_ids) % self.page_size])
        node, pos, parts, hosted = self.root, 0, [], []
        self._clock += 1
        while pos < len(key) and (child := node.children.get(self._child_key(key, pos))) is not None:
            matched = self._match_len(child.key, key, pos)
            if matched < len(child.key):
                child = self._split(child, matched)
            self._touch(child)
            if child.on_device:
                parts.append(child.slots)
            else:
                hosted.append(child)
            node, pos = child, pos + matched
        device_end = node if not hosted else hosted[0].parent
        return MatchResult(torch.cat(parts) if parts else empty_slots(), device_end, tuple(hosted))

    def cached_len(self, token_ids: Sequence[int], with_host: bool = False) -> int:
        """How many leading tokens of `token_ids` `match_prefix` would find on the device (and
        on the host tier, `with_host`), without touching the tree (no split, no access time):
        for looking ahead at requests still waiting."""
        if self.disable:
            return 0
        key = list(token_ids[: len(token_ids) - len(token_ids) % self.page_size])
        node, pos = self.root, 0
        while pos < len(key) and (child := node.children.get(self._child_key(key, pos))) is not None:
            if not (child.on_device or with_host):
                break
            matched = self._match_len(child.key, key, pos)
            pos += matched
            if matched < len(child.key):
                break
            node = child
        return pos

    def insert(self, token_ids: Sequence[int], slots: torch.Tensor, priority: int = 0) -> int:
        """Caches `token_ids` (a whole number of pages) at `slots`; returns how many leading
        tokens were already cached on the device. Every node on the path keeps the highest
        `priority` it saw. The tree adopts `slots[returned:]` (nodes the host tier alone held get
        theirs); the caller still owns `slots[:returned]` and frees those it allocated itself
        (they duplicate the tree's). A disabled cache adopts nothing and returns 0: use
        `cache_finished`/`cache_unfinished`."""
        if len(token_ids) != len(slots):
            raise ValueError(f"{len(token_ids)} tokens but {len(slots)} slots")
        if len(token_ids) % self.page_size:
            raise ValueError(f"{len(token_ids)} tokens are not a whole number of {self.page_size}-token pages")
        if self.disable:
            return 0
        key = list(token_ids)
        # A copy: the caller's tensor may be a view into a buffer it reuses.
        slots = torch.as_tensor(slots, dtype=torch.int64).clone()
        node, pos, present = self.root, 0, None
        self._clock += 1
        while pos < len(key) and (child := node.children.get(self._child_key(key, pos))) is not None:
            matched = self._match_len(child.key, key, pos)
            if matched < len(child.key):
                child = self._split(child, matched)
            child.priority = max(child.priority, priority)
            self._touch(child)
            if not child.on_device:
                present = pos if present is None else present
                self.revive(child, slots[pos : pos + matched])
            node, pos = child, pos + matched
        if pos < len(key):
            leaf = TreeNode(
                key[pos:],
                slots[pos:],
                node,
                next(self._ids),
                last_access=self._clock,
                created=self._clock,
                priority=priority,
            )
            node.children[self._child_key(leaf.key, 0)] = leaf
            self._evictable += len(leaf.key)
        return pos if present is None else present

    def revive(self, node: TreeNode, slots: torch.Tensor) -> None:
        """Puts a node the host tier alone held back on the device, at `slots` (the tree's now)."""
        assert not node.on_device and len(slots) == len(node.key)
        node.slots = slots
        self._evictable += len(node.key)  # host-held nodes are never locked
        self.host_leaves.push(node.parent)  # it may have been the last host-only child in the way

    def _touch(self, node: TreeNode) -> None:  # an access: its eviction key changes, the host queue hears
        node.last_access = self._clock
        self.host_leaves.push(node)

    def inc_lock_ref(self, node: TreeNode) -> None:
        """Protects `node` (a device node) and its ancestors from eviction (one count per call)."""
        while node is not self.root:
            if node.lock_ref == 0:
                self._evictable -= len(node.key)
                self._protected += len(node.key)
            node.lock_ref += 1
            node = node.parent

    def dec_lock_ref(self, node: TreeNode) -> None:
        """Undoes one `inc_lock_ref(node)`."""
        if node is not self.root and node.lock_ref <= 0:
            raise RuntimeError("dec_lock_ref on an unlocked node")
        while node is not self.root:
            node.lock_ref -= 1
            if node.lock_ref == 0:
                self._evictable += len(node.key)
                self._protected -= len(node.key)
            node = node.parent

    def record_hit(self, node: TreeNode) -> None:
        """Counts one request admitted with `node`'s prefix cached (lfu and slru read it)."""
        while node is not self.root:
            node.hit_count += 1
            node = node.parent

    def evict(self, num_tokens: int, free_fn: FreeFn) -> int:
        """Evicts unlocked device leaves in the policy's order until at least `num_tokens` device
        tokens are gone or nothing evictable is left; frees their slots; returns tokens evicted."""
        return tier_eviction.evict_device(self, num_tokens, free_fn)

    def prefix_tokens(self, node: TreeNode) -> list[int]:
        """The tokens spelled from the root to the end of `node`'s edge."""
        edges = []
        while node is not self.root:
            edges.append(node.key)
            node = node.parent
        return [token for edge in reversed(edges) for token in edge]

    def path_slots(self, node: TreeNode) -> torch.Tensor:
        """The device slots from the root to the end of `node`'s edge (`node` on the device)."""
        parts = []
        while node is not self.root:
            parts.append(node.slots)
            node = node.parent
        return torch.cat(parts[::-1]) if parts else empty_slots()

    def cached_slots(self) -> torch.Tensor:
        """Every device slot the tree holds (for audits and tests)."""
        parts = [node.slots for node in self.nodes() if node.on_device]
        return torch.cat(parts) if parts else empty_slots()

    def host_rows(self) -> torch.Tensor:
        """Every host row the tree holds (for audits and tests)."""
        parts = [node.host_slots for node in self.nodes() if node.backed_up]
        return torch.cat(parts) if parts else empty_slots()

    def nodes(self) -> list[TreeNode]:
        """Every node but the root."""
        stack, nodes = list(self.root.children.values()), []
        while stack:
            node = stack.pop()
            nodes.append(node)
            stack.extend(node.children.values())
        return nodes

    def child_key(self, key: list[int]) -> int | tuple[int, ...]:
        """How a node whose edge is `key` is filed among its parent's children."""
        return self._child_key(key, 0)

    def _child_key(self, key: list[int], pos: int) -> int | tuple[int, ...]:
        return key[pos] if self.page_size == 1 else tuple(key[pos : pos + self.page_size])

    def _match_len(self, edge: list[int], key: list[int], pos: int) -> int:
        """Length of the common prefix of `edge` and `key[pos:]`, rounded down to whole pages."""
        n = min(len(edge), len(key) - pos)
        if edge[:n] == key[pos : pos + n]:  # the common case, compared at C speed
            return n  # both lengths are whole pages
        i = 0
        while edge[i] == key[pos + i]:
            i += 1
        return i - i % self.page_size

    def _split(self, child: TreeNode, length: int) -> TreeNode:
        """Cuts `child`'s edge after `length` tokens; returns the new upper node. Sizes and locks
        are unchanged: both halves keep `child`'s lock count and tiers."""
        head = TreeNode(
            child.key[:length],
            None if child.slots is None else child.slots[:length],
            child.parent,
            next(self._ids),
            host_slots=None if child.host_slots is None else child.host_slots[:length],
            lock_ref=child.lock_ref,
            last_access=child.last_access,
            created=child.created,
            hit_count=child.hit_count,
            priority=child.priority,
        )
        child.parent.children[self._child_key(head.key, 0)] = head
        child.key, child.parent = child.key[length:], head
        if child.slots is not None:
            child.slots = child.slots[length:]
        if child.host_slots is not None:
            child.host_slots = child.host_slots[length:]
        head.children[self._child_key(child.key, 0)] = child
        self.host_leaves.push(head)
        return head
