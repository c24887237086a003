"""RadixCache: matching, splitting, insertion overlap, locking, LRU eviction, paging, and a
randomized run against the allocator checking that every slot has exactly one owner."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

import pytest
import torch

from sglang.runtime.memory import PagedTokenAllocator
from sglang.runtime.memory.radix_cache import MatchResult, RadixCache, TreeNode


def slots(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64)


class Freed:
    """A free_fn that records what it was given."""

    def __init__(self) -> None:
        self.slots: list[int] = []

    def __call__(self, s: torch.Tensor) -> None:
        self.slots.extend(s.tolist())


def nodes(cache: RadixCache) -> list[TreeNode]:
    stack, out = list(cache.root.children.values()), []
    while stack:
        out.append(stack.pop())
        stack.extend(out[-1].children.values())
    return out


def test_match_ending_mid_edge_splits_it():
    cache = RadixCache()
    assert cache.insert([1, 2, 3, 4], slots(11, 12, 13, 14)) == 0
    match = cache.match_prefix([1, 2, 9])
    assert match.slots.tolist() == [11, 12] and match.num_cached == 2
    assert match.last_node.key == [1, 2]
    assert [c.key for c in match.last_node.children.values()] == [[3, 4]]
    assert cache.total_size() == 4 and len(nodes(cache)) == 2
    assert cache.match_prefix([1, 2, 3, 4, 5]).slots.tolist() == [11, 12, 13, 14]
    assert cache.match_prefix([7]).num_cached == 0


def test_insert_of_a_cached_prefix_reports_the_overlap():
    cache = RadixCache()
    cache.insert([1, 2, 3], slots(1, 2, 3))
    assert cache.insert([1, 2, 3, 4, 5], slots(7, 8, 9, 4, 5)) == 3
    assert cache.insert([1, 2], slots(7, 8)) == 2
    assert cache.insert([1, 2, 6], slots(7, 8, 6)) == 2
    assert cache.total_size() == 6
    assert cache.match_prefix([1, 2, 3, 4, 5]).slots.tolist() == [1, 2, 3, 4, 5]
    assert sorted(cache.cached_slots().tolist()) == [1, 2, 3, 4, 5, 6]


def test_eviction_is_least_recently_used_first():
    cache = RadixCache()
    cache.insert([1, 1], slots(1, 2))
    cache.insert([2, 2], slots(3, 4))
    cache.insert([3, 3], slots(5, 6))
    cache.match_prefix([1, 1])
    freed = Freed()
    assert cache.evict(2, freed) == 2
    assert freed.slots == [3, 4]
    cache.evict(1, freed)
    assert freed.slots == [3, 4, 5, 6]
    assert cache.total_size() == 2


def test_evicting_the_last_child_makes_the_parent_evictable():
    cache = RadixCache()
    cache.insert([1, 2, 3], slots(1, 2, 3))
    cache.insert([1, 2, 4], slots(1, 2, 4))
    freed = Freed()
    assert cache.evict(3, freed) == 4
    assert sorted(freed.slots) == [1, 2, 3, 4]
    assert cache.total_size() == 0 and not cache.root.children


def test_locked_nodes_are_never_evicted():
    cache = RadixCache()
    cache.insert([1, 2, 3], slots(1, 2, 3))
    cache.insert([1, 2, 4], slots(1, 2, 4))
    match = cache.match_prefix([1, 2, 3])
    cache.inc_lock_ref(match.last_node)
    assert cache.protected_size() == 3 and cache.evictable_size() == 1
    freed = Freed()
    assert cache.evict(100, freed) == 1
    assert freed.slots == [4]
    cache.dec_lock_ref(match.last_node)
    assert cache.protected_size() == 0 and cache.evictable_size() == 3
    with pytest.raises(RuntimeError):
        cache.dec_lock_ref(match.last_node)
    assert cache.evict(100, freed) == 3


def test_page_size_above_one_matches_only_whole_pages():
    cache = RadixCache(page_size=2)
    cache.insert([1, 2, 3, 4], slots(2, 3, 4, 5))
    assert cache.match_prefix([1, 2, 3]).slots.tolist() == [2, 3]
    assert cache.match_prefix([1, 2, 3, 9, 5]).slots.tolist() == [2, 3]
    assert cache.match_prefix([1, 2, 3, 4, 5]).slots.tolist() == [2, 3, 4, 5]
    assert cache.match_prefix([1, 9, 3, 4]).num_cached == 0
    assert cache.insert([1, 2, 7, 8], slots(6, 7, 8, 9)) == 2
    with pytest.raises(ValueError, match="whole number"):
        cache.insert([1, 2, 3], slots(1, 2, 3))


def test_cache_finished_frees_duplicates_and_the_partial_page():
    cache, freed = RadixCache(page_size=2), Freed()
    cache.insert([1, 2], slots(2, 3))
    miss = MatchResult(slots(), cache.root)  # this request matched nothing
    cache.cache_finished([1, 2, 3, 4, 5], slots(6, 7, 8, 9, 10), miss, freed)
    assert sorted(freed.slots) == [6, 7, 10]
    assert cache.match_prefix([1, 2, 3, 4]).slots.tolist() == [2, 3, 8, 9]


def test_cache_unfinished_swaps_duplicates_for_the_trees_slots_and_moves_the_lock():
    cache, freed = RadixCache(), Freed()
    cache.insert([1, 2], slots(1, 2))
    old = MatchResult(slots(), cache.root)
    match, new_slots = cache.cache_unfinished([1, 2, 3], slots(5, 6, 7), old, freed)
    assert freed.slots == [5, 6]
    assert new_slots.tolist() == [1, 2, 7] and match.num_cached == 3
    assert cache.protected_size() == 3


def test_disabled_cache_caches_nothing():
    cache, freed = RadixCache(disable=True), Freed()
    assert cache.insert([1, 2], slots(1, 2)) == 0
    match = cache.match_prefix([1, 2])
    assert match.num_cached == 0
    cache.inc_lock_ref(match.last_node)
    match, s = cache.cache_unfinished([1, 2], slots(1, 2), match, freed)
    cache.cache_finished([1, 2], s, match, freed)
    assert freed.slots == [1, 2] and cache.total_size() == 0


@dataclass
class Request:
    tokens: list[int]
    slots: torch.Tensor
    match: MatchResult

    @property
    def own_slots(self) -> torch.Tensor:
        return self.slots[self.match.num_cached :]


class Simulation:
    """A scheduler in miniature: requests arrive, grow, share, finish or get retracted."""

    def __init__(self, seed: int, page_size: int, disable: bool) -> None:
        self.rng = random.Random(seed)
        self.ps = page_size
        self.alloc = PagedTokenAllocator(num_pages=96 // page_size, page_size=page_size)
        self.cache = RadixCache(page_size=page_size, disable=disable)
        self.requests: list[Request] = []
        self.prompts = [[self.rng.randrange(3) for _ in range(12)] for _ in range(3)]

    def random_tokens(self) -> list[int]:
        head = self.rng.choice(self.prompts)[: self.rng.randrange(13)]
        return head + [self.rng.randrange(3) for _ in range(self.rng.randrange(1, 10))]

    def allocate(self, last: int | None, n: int) -> torch.Tensor | None:
        short = self.alloc.pages_needed([last], [n]) - self.alloc.num_free_pages
        if short > 0:
            self.cache.evict(short * self.ps, self.alloc.free)
        return self.alloc.alloc_extend(last, n)

    def step(self) -> None:
        rng, cache = self.rng, self.cache
        op = rng.choice(["arrive", "arrive", "grow", "grow", "share", "finish", "retract", "evict", "probe"])
        if op == "arrive":
            tokens = self.random_tokens()
            match = cache.match_prefix(tokens[:-1])
            cache.inc_lock_ref(match.last_node)
            last = int(match.slots[-1]) if match.num_cached else None
            new = self.allocate(last, len(tokens) - match.num_cached)
            if new is None:
                cache.dec_lock_ref(match.last_node)
            else:
                self.requests.append(Request(tokens, torch.cat([match.slots, new]), match))
        elif op == "probe":
            cache.match_prefix(self.random_tokens())
        elif op == "evict":
            cache.evict(rng.randrange(1, 20), self.alloc.free)
        elif self.requests:
            req = rng.choice(self.requests)
            if op == "grow":
                added = [rng.randrange(3) for _ in range(rng.randrange(1, 4))]
                new = self.allocate(int(req.slots[-1]), len(added))
                if new is None:
                    self.retract(req)
                else:
                    req.tokens += added
                    req.slots = torch.cat([req.slots, new])
            elif op == "share":
                req.match, req.slots = cache.cache_unfinished(req.tokens, req.slots, req.match, self.alloc.free)
            elif op == "finish":
                cache.cache_finished(req.tokens, req.slots, req.match, self.alloc.free)
                self.requests.remove(req)
            else:
                self.retract(req)

    def retract(self, req: Request) -> None:
        self.alloc.free(req.own_slots)
        self.cache.dec_lock_ref(req.match.last_node)
        self.requests.remove(req)

    def check(self) -> None:
        cache, alloc = self.cache, self.alloc
        tree = cache.cached_slots()
        held = torch.cat([tree, *(r.own_slots for r in self.requests)])
        assert held.unique().numel() == held.numel(), "a slot has two owners"
        assert torch.equal(held.sort().values, alloc.allocated_slots()), "allocator and owners disagree"
        assert tree.numel() == cache.total_size()
        in_use = alloc.allocated_slots().div(self.ps, rounding_mode="floor").unique().numel()
        assert in_use + alloc.num_free_pages == alloc.num_pages - 1, "a page leaked or is listed twice"

        expected_locks: Counter[int] = Counter()
        for req in self.requests:
            node, path_keys, path_slots = req.match.last_node, [], []
            while node is not cache.root:
                expected_locks[node.node_id] += 1
                path_keys[:0], path_slots[:0] = node.key, node.slots.tolist()
                node = node.parent
            assert path_keys == req.tokens[: len(path_keys)]
            assert path_slots == req.slots[: req.match.num_cached].tolist()
            positions = torch.arange(len(req.slots))
            assert torch.equal(req.slots % self.ps, positions % self.ps)
        protected = 0
        for node in nodes(cache):
            assert node.lock_ref == expected_locks[node.node_id]
            assert len(node.key) == len(node.slots) and len(node.key) % self.ps == 0
            protected += len(node.key) if node.lock_ref else 0
        assert protected == cache.protected_size()

    def drain(self) -> None:
        for req in list(self.requests):
            self.cache.cache_finished(req.tokens, req.slots, req.match, self.alloc.free)
            self.requests.remove(req)
        self.cache.evict(self.cache.total_size(), self.alloc.free)


@pytest.mark.parametrize(("page_size", "disable"), [(1, False), (4, False), (2, True)])
def test_random_operations_keep_tree_and_allocator_in_agreement(page_size, disable):
    sim = Simulation(seed=page_size, page_size=page_size, disable=disable)
    initial_free = sim.alloc.num_free_pages
    for _ in range(2000):
        sim.step()
        sim.check()
    sim.drain()
    sim.check()
    assert sim.cache.total_size() == 0 and sim.cache.protected_size() == 0
    assert sim.alloc.num_free_pages == initial_free
    assert sim.alloc.allocated_slots().numel() == 0
