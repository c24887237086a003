"""RadixAttention's prefix cache: which token prefixes have their KV in the pool, and where.

A radix tree over token ids. Each node's edge holds a run of tokens and the KV slots of those
tokens; the path from the root to a node spells a prefix whose KV lives at the concatenation of
the slots along the path. The tree says what is cached; the allocator
(runtime/memory/token_allocator.py) says which slots are free.

Invariants:
- Every edge is a whole number of pages: keys are truncated to a multiple of `page_size`, so
  sharing a prefix shares whole pages and no page is split between the tree and a request.
- The children of a node differ in their first page (their first token when `page_size == 1`).
- Each slot in the tree is held by exactly one node. The tree owns it until eviction hands it
  to `free_fn`; slots a request allocated itself stay the request's until it hands them over.
- `lock_ref` of a node counts the requests using it or a descendant (locking a node locks its
  ancestors); locked nodes are never evicted. `protected_size()` counts tokens on locked nodes,
  `evictable_size()` those on unlocked ones; `total_size()` is their sum.
- Eviction takes unlocked leaves in the order of the eviction policy (runtime/memory/eviction.py;
  LRU by default: matching and inserting touch every node on the path); evicting a leaf may make
  its parent an evictable leaf. An `on_evict` hook sees each leaf before its slots are freed (the
  storage tier copies the pages out there).

A request's life (the scheduler's side):
    match = cache.match_prefix(prompt[:-1])    # keep one token to compute; num_cached is reported
    cache.inc_lock_ref(match.last_node)        # its prefix must survive while it runs
    new = allocator.alloc_extend(last slot of match.slots or None, len(prompt) - match.num_cached)
    slots = cat(match.slots, new)              # grows as it decodes
    match, slots = cache.cache_unfinished(tokens, slots, match, free)   # optional (chunked prefill)
    cache.cache_finished(tokens, slots, match, free)    # or: free(slots[num_cached:]) and unlock
With `disable=True` nothing is cached: matches are empty and finished requests free everything.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from sglang.runtime.memory.eviction import eviction_policy

FreeFn = Callable[[torch.Tensor], None]

CACHE_NAMESPACE_BITS = 40
"""Keys of a namespace (a LoRA adapter load) are token ids plus `namespace << 40`: token ids are
far below `2**40`, so namespaced keys never collide with another namespace's."""


def _empty_slots() -> torch.Tensor:
    return torch.empty(0, dtype=torch.int64)


@dataclass(eq=False)
class TreeNode:
    """One edge of the tree and the node it leads to. `len(key) == len(slots)`."""

    key: list[int]
    slots: torch.Tensor
    parent: TreeNode | None
    node_id: int
    children: dict[int | tuple[int, ...], TreeNode] = field(default_factory=dict)
    lock_ref: int = 0
    last_access: int = 0
    created: int = 0
    hit_count: int = 0  # requests admitted with this node in their cached prefix
    priority: int = 0  # highest priority of the requests that cached or reused it


@dataclass(frozen=True)
class MatchResult:
    """The cached prefix of a query: its slots, and the node to lock while they are used."""

    slots: torch.Tensor
    last_node: TreeNode

    @property
    def num_cached(self) -> int:
        return self.slots.numel()


class RadixCache:
    """The prefix tree; with `disable=True` the same interface caches nothing."""

    def __init__(
        self,
        page_size: int = 1,
        disable: bool = False,
        eviction: str = "lru",
        on_evict: Callable[[TreeNode], None] | None = None,
    ) -> None:
        if page_size < 1:
            raise ValueError(f"page_size must be at least 1, got {page_size}")
        self.page_size = page_size
        self.disable = disable
        self.policy = eviction_policy(eviction)
        self.on_evict = on_evict
        self.reset()

    def reset(self) -> None:
        """Forgets everything without freeing slots: the caller clears the allocator too."""
        self._ids = itertools.count()
        self._clock = 0  # a logical clock: deterministic LRU order, no ties along one path
        self.root = TreeNode(key=[], slots=_empty_slots(), parent=None, node_id=next(self._ids))
        self.root.lock_ref = 1  # never evicted, and lock walks stop at it
        self._evictable = 0
        self._protected = 0

    def evictable_size(self) -> int:
        return self._evictable

    def protected_size(self) -> int:
        return self._protected

    def total_size(self) -> int:
        return self._evictable + self._protected

    def match_prefix(self, token_ids: Sequence[int]) -> MatchResult:
        """The longest cached whole-page prefix of `token_ids`. An edge the match ends inside
        is split, so that `last_node` covers exactly the matched prefix."""
        if self.disable:
            return MatchResult(_empty_slots(), self.root)
        key = list(token_ids[: len(token_ids) - len(token_ids) % self.page_size])
        node, pos, parts = self.root, 0, []
        self._clock += 1
        while pos < len(key) and (child := node.children.get(self._child_key(key, pos))) is not None:
            matched = self._match_len(child.key, key, pos)
            if matched < len(child.key):
                child = self._split(child, matched)
            child.last_access = self._clock
            parts.append(child.slots)
            node, pos = child, pos + matched
        return MatchResult(torch.cat(parts) if parts else _empty_slots(), node)

    def cached_len(self, token_ids: Sequence[int]) -> int:
        """How many leading tokens of `token_ids` `match_prefix` would find, without touching
        the tree (no split, no access time): for looking ahead at requests still waiting."""
        if self.disable:
            return 0
        key = list(token_ids[: len(token_ids) - len(token_ids) % self.page_size])
        node, pos = self.root, 0
        while pos < len(key) and (child := node.children.get(self._child_key(key, pos))) is not None:
            matched = self._match_len(child.key, key, pos)
            pos += matched
            if matched < len(child.key):
                break
            node = child
        return pos

    def insert(self, token_ids: Sequence[int], slots: torch.Tensor, priority: int = 0) -> int:
        """Caches `token_ids` (a whole number of pages) at `slots`; returns how many leading
        tokens were already cached. Every node on the path keeps the highest `priority` it saw.
        The tree adopts `slots[returned:]`; the caller still owns
        `slots[:returned]` and frees those it allocated itself (they duplicate the tree's).
        A disabled cache adopts nothing and returns 0: use `cache_finished`/`cache_unfinished`."""
        if len(token_ids) != len(slots):
            raise ValueError(f"{len(token_ids)} tokens but {len(slots)} slots")
        if len(token_ids) % self.page_size:
            raise ValueError(f"{len(token_ids)} tokens are not a whole number of {self.page_size}-token pages")
        if self.disable:
            return 0
        key = list(token_ids)
        node, pos = self.root, 0
        self._clock += 1
        while pos < len(key) and (child := node.children.get(self._child_key(key, pos))) is not None:
            matched = self._match_len(child.key, key, pos)
            if matched < len(child.key):
                child = self._split(child, matched)
            child.last_access = self._clock
            child.priority = max(child.priority, priority)
            node, pos = child, pos + matched
        if pos < len(key):
            # A copy: the caller's tensor may be a view into a buffer it reuses.
            leaf_slots = torch.as_tensor(slots, dtype=torch.int64)[pos:].clone()
            leaf = TreeNode(
                key[pos:],
                leaf_slots,
                node,
                next(self._ids),
                last_access=self._clock,
                created=self._clock,
                priority=priority,
            )
            node.children[self._child_key(leaf.key, 0)] = leaf
            self._evictable += len(leaf.key)
        return pos

    def inc_lock_ref(self, node: TreeNode) -> None:
        """Protects `node` and its ancestors from eviction (one count per call)."""
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
        """Evicts unlocked leaves in the policy's order until at least `num_tokens` tokens are
        gone or nothing evictable is left; frees their slots; returns tokens evicted."""
        heap = [(self.policy(n), n.node_id, n) for n in self._leaves() if n.lock_ref == 0]
        heapq.heapify(heap)
        evicted: list[torch.Tensor] = []
        count = 0
        while count < num_tokens and heap:
            _, _, node = heapq.heappop(heap)
            if self.on_evict is not None:
                self.on_evict(node)
            parent = node.parent
            del parent.children[self._child_key(node.key, 0)]
            evicted.append(node.slots)
            count += len(node.key)
            self._evictable -= len(node.key)
            if not parent.children and parent.lock_ref == 0:
                heapq.heappush(heap, (self.policy(parent), parent.node_id, parent))
        if evicted:
            free_fn(torch.cat(evicted))
        return count

    def cache_finished(
        self,
        token_ids: Sequence[int],
        slots: torch.Tensor,
        match: MatchResult,
        free_fn: FreeFn,
        priority: int = 0,
    ) -> None:
        """A finished (or aborted) request hands over its KV: `slots[i]` holds `token_ids[i]`, and
        `slots[:match.num_cached]` are the tree's, locked by `match`. Its whole pages are cached,
        duplicates of what another request cached meanwhile and the partial last page are freed,
        and its lock is released. Afterwards the request owns no slot."""
        if len(token_ids) != len(slots):
            raise ValueError(f"{len(token_ids)} tokens but {len(slots)} slots")
        if self.disable:
            free_fn(slots[match.num_cached :])
            return
        aligned = len(token_ids) - len(token_ids) % self.page_size
        present = self.insert(token_ids[:aligned], slots[:aligned], priority)
        free_fn(slots[match.num_cached : present])
        free_fn(slots[aligned:])
        self.dec_lock_ref(match.last_node)

    def cache_unfinished(
        self,
        token_ids: Sequence[int],
        slots: torch.Tensor,
        match: MatchResult,
        free_fn: FreeFn,
        priority: int = 0,
    ) -> tuple[MatchResult, torch.Tensor]:
        """Caches a running request's whole pages so others can share them (chunked prefill).
        Returns its new match (locked in place of the old one) and its slots, where any slot that
        duplicated the tree's (freed here) is replaced by the tree's."""
        if len(token_ids) != len(slots):
            raise ValueError(f"{len(token_ids)} tokens but {len(slots)} slots")
        if self.disable:
            return match, slots
        aligned = len(token_ids) - len(token_ids) % self.page_size
        present = self.insert(token_ids[:aligned], slots[:aligned], priority)
        free_fn(slots[match.num_cached : present])
        new_match = self.match_prefix(token_ids[:aligned])
        self.inc_lock_ref(new_match.last_node)
        self.dec_lock_ref(match.last_node)
        return new_match, torch.cat([new_match.slots, slots[aligned:]])

    def prefix_tokens(self, node: TreeNode) -> list[int]:
        """The tokens spelled from the root to the end of `node`'s edge."""
        edges = []
        while node is not self.root:
            edges.append(node.key)
            node = node.parent
        return [token for edge in reversed(edges) for token in edge]

    def cached_slots(self) -> torch.Tensor:
        """Every slot the tree holds (for audits and tests)."""
        parts = [node.slots for node in self._nodes()]
        return torch.cat(parts) if parts else _empty_slots()

    def _nodes(self) -> list[TreeNode]:
        """Every node but the root."""
        stack, nodes = list(self.root.children.values()), []
        while stack:
            node = stack.pop()
            nodes.append(node)
            stack.extend(node.children.values())
        return nodes

    def _leaves(self) -> list[TreeNode]:
        return [node for node in self._nodes() if not node.children]

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
        are unchanged: both halves keep `child`'s lock count."""
        head = TreeNode(
            child.key[:length],
            child.slots[:length],
            child.parent,
            next(self._ids),
            lock_ref=child.lock_ref,
            last_access=child.last_access,
            created=child.created,
            hit_count=child.hit_count,
            priority=child.priority,
        )
        child.parent.children[self._child_key(head.key, 0)] = head
        child.key, child.slots, child.parent = child.key[length:], child.slots[length:], head
        head.children[self._child_key(child.key, 0)] = child
        return head
