"""The radix tree across tiers, without a model: nodes record their device slots and host rows,
a match walks device then host, host-held nodes are loaded back bit for bit, each write policy
backs up when it says, and host eviction and dropped subtrees leave no row or slot behind.

The "model" writes each token's id (times the layer number) as its KV, so a loaded slot's KV
says which token it holds."""

from __future__ import annotations

import random

import pytest
import torch

from sglang.platforms.device_runtime import DeviceRuntime
from sglang.runtime.memory.eviction import POLICIES
from sglang.runtime.memory.hicache_setup import HiCacheConfig
from sglang.runtime.memory.hierarchical_cache import HierarchicalCache, Loaded
from sglang.runtime.memory.host_pool import HostKVPool
from sglang.runtime.memory.host_tier import HostTier
from sglang.runtime.memory.kv_pages import KVPageIO
from sglang.runtime.memory.leaf_queue import COMPACT_SLACK
from sglang.runtime.memory.radix_cache import RadixCache, TreeNode
from sglang.runtime.memory.token_allocator import PagedTokenAllocator

LAYERS = 2


class Layout:
    """A K/V layout of one head of width 2: `[2, slots, 1, 2]` per layer."""

    def kv_buffer_shape(self, slots: int) -> tuple[int, ...]:
        return (2, slots, 1, 2)


class Runner:
    def __init__(self, slots: int) -> None:
        self.kv_buffers = [torch.zeros(Layout().kv_buffer_shape(slots)) for _ in range(LAYERS)]

    def compute(self, slots: torch.Tensor, tokens: list[int]) -> None:
        for layer, buffer in enumerate(self.kv_buffers):
            value = torch.tensor(tokens, dtype=torch.float32) * (layer + 1)
            buffer[:, slots] = value[None, :, None, None]

    def tokens_at(self, slots: torch.Tensor) -> list[list[int]]:
        """Per layer, the token each slot's KV was computed for."""
        return [(b[0, slots, 0, 0] / (layer + 1)).long().tolist() for layer, b in enumerate(self.kv_buffers)]


class Tiers:
    """A pool of `pool_tokens` slots (page size 1) under a host tier of `host_tokens` rows."""

    def __init__(
        self, host_tokens: int, policy: str = "write_back", pool_tokens: int = 64, eviction: str = "lru"
    ) -> None:
        self.allocator = PagedTokenAllocator(pool_tokens + 1, 1)
        self.runner = Runner(self.allocator.num_slots)
        runtime = DeviceRuntime()
        io = KVPageIO(self.runner, Layout(), runtime)
        self.cache = RadixCache(eviction=eviction)
        pool = HostKVPool(host_tokens, io.block_shape(host_tokens), io.axis + 1, torch.float32, runtime.host_buffer)
        self.host = HostTier(pool, self.cache, io)
        config = HiCacheConfig(None, 4, policy, "best_effort", 1.0, 0.25)
        self.hicache = HierarchicalCache(config, self.cache, self.allocator, self.host, None, self.allocator.free)

    def serve(self, tokens: list[int]) -> Loaded:
        """One request as the scheduler runs it: match, load, lock, compute the rest, hand over."""
        loaded = self.hicache.load_prefix(tokens, self.cache.match_prefix(tokens), None)
        match = loaded.match
        self.cache.inc_lock_ref(match.last_node)
        self.cache.record_hit(match.last_node)
        self.hicache.on_hit(match)
        count = len(tokens) - match.num_cached
        if count > self.allocator.available_tokens():
            self.cache.evict(count - self.allocator.available_tokens(), self.allocator.free)
        new = self.allocator.alloc_extend(int(match.slots[-1]) if match.num_cached else None, count)
        self.runner.compute(new, tokens[match.num_cached :])
        self.cache.cache_finished(tokens, torch.cat([match.slots, new]), match, self.allocator.free)
        self.hicache.on_cached(tokens)
        return loaded

    def assert_consistent(self) -> None:
        """Every allocated slot and used host row is held by exactly one node, and back."""
        device = self.cache.cached_slots().tolist()
        assert sorted(device) == sorted(self.allocator.allocated_slots().tolist())
        rows = self.cache.host_rows().tolist()
        assert len(set(rows)) == len(rows) == self.host.pool.used_tokens
        for node in self.cache.nodes():
            assert node.on_device or node.on_host
            assert node.parent is self.cache.root or node.parent.on_device or not node.on_device
            if node.backed_up:  # a host copy holds exactly the node's tokens' KV
                kv = self.host.pool.read(node.host_slots)
                assert (kv[0, 0, :, 0, 0]).long().tolist() == node.key


A = list(range(100, 108))
B = list(range(200, 208))


def test_evicted_nodes_stay_host_held_and_come_back_bit_for_bit():
    t = Tiers(host_tokens=32)
    t.serve(A)
    t.serve(B)
    assert t.cache.evict(100, t.allocator.free) == 16
    assert t.cache.total_size() == 0 and t.host.pool.used_tokens == 16
    match = t.cache.match_prefix(A)
    assert match.num_cached == 0 and match.host_tokens == 8
    t.assert_consistent()
    loaded = t.serve(A)
    assert (loaded.device_tokens, loaded.host_tokens, loaded.storage_tokens) == (0, 8, 0)
    assert t.runner.tokens_at(loaded.match.slots) == [A, A]
    assert t.cache.match_prefix(A).num_cached == 8 and t.cache.match_prefix(B).host_tokens == 8
    t.assert_consistent()


def test_a_match_walks_the_device_prefix_then_the_host_held_rest():
    t = Tiers(host_tokens=32)
    t.serve(A)
    t.serve(A[:4] + B[:4])  # splits A: a shared device head, two tails
    t.cache.match_prefix(A[:4] + B[:4])  # B's tail is the more recent
    assert t.cache.evict(1, t.allocator.free) == 4  # A's tail, least recently used
    match = t.cache.match_prefix(A)
    assert match.num_cached == 4 and [n.key for n in match.host_nodes] == [A[4:]]
    assert t.cache.cached_len(A) == 4 and t.cache.cached_len(A, with_host=True) == 8
    loaded = t.serve(A)
    assert (loaded.device_tokens, loaded.host_tokens) == (4, 4)
    assert t.runner.tokens_at(loaded.match.slots) == [A, A]
    t.assert_consistent()


def test_computing_a_host_held_prefix_again_puts_it_back_on_the_device():
    t = Tiers(host_tokens=32)
    t.serve(A)
    t.cache.evict(100, t.allocator.free)
    slots = t.allocator.alloc_extend(None, 8)
    t.runner.compute(slots, A)
    assert t.cache.insert(A, slots) == 0  # nothing was on the device: the tree adopts them all
    assert t.cache.match_prefix(A).slots.tolist() == slots.tolist()
    t.assert_consistent()


@pytest.mark.parametrize(
    ("policy", "after_each_serve"),
    [
        ("write_through", [8, 8, 8]),  # every hand-over
        ("write_through_selective", [0, 0, 8]),  # once a second request reused the prefix
        ("write_back", [0, 0, 0]),  # only on eviction
    ],
)
def test_each_write_policy_backs_up_when_it_says(policy: str, after_each_serve: list[int]):
    t = Tiers(host_tokens=32, policy=policy)
    seen = []
    for _ in after_each_serve:
        t.serve(A)
        seen.append(t.host.pool.used_tokens)
    assert seen == after_each_serve
    t.cache.evict(100, t.allocator.free)  # under every policy, eviction backs up
    assert t.host.pool.used_tokens == 8 and t.cache.match_prefix(A).host_tokens == 8
    t.assert_consistent()


def test_a_full_host_tier_drops_its_least_recently_used_host_held_nodes():
    t = Tiers(host_tokens=8)
    t.serve(A)
    t.serve(B)
    t.cache.evict(100, t.allocator.free)  # A backed up, then dropped for B
    assert t.host.evicted_tokens == 8 and t.hicache.stats.host_tokens_evicted == 8
    assert t.cache.match_prefix(A).host_tokens == 0 and t.cache.match_prefix(B).host_tokens == 8
    t.assert_consistent()


def test_a_node_too_large_to_back_up_goes_with_its_host_held_subtree():
    t = Tiers(host_tokens=2)
    t.serve([1, 2, 3, 4, 5])
    t.serve([1, 2, 3, 6, 7])  # [1, 2, 3] with tails [4, 5] and [6, 7]
    t.cache.evict(4, t.allocator.free)  # the tails: the later one stays backed up
    assert t.host.pool.used_tokens == 2
    t.cache.evict(3, t.allocator.free)  # [1, 2, 3] has no room below: it and its subtree go
    assert not t.cache.root.children and t.host.pool.used_tokens == 0
    t.assert_consistent()


def test_a_load_never_drops_the_host_rows_it_reads():
    """The pool is full of other prefixes, so loading evicts them into a full host tier: the room
    those backups take must not come from the nodes being loaded."""
    t = Tiers(host_tokens=8, pool_tokens=8)
    t.serve(A)
    t.cache.evict(100, t.allocator.free)  # A: host-held, the host tier full
    t.serve(B)  # B fills the pool
    loaded = t.serve(A)
    assert loaded.host_tokens == 8 and t.runner.tokens_at(loaded.match.slots) == [A, A]
    t.assert_consistent()


def test_flushing_the_device_tier_keeps_what_the_host_tier_holds():
    t = Tiers(host_tokens=32, policy="write_through")
    t.serve(A)
    t.hicache.flush_device()
    assert t.cache.total_size() == 0 and t.allocator.available_tokens() == 64
    assert t.serve(A).host_tokens == 8
    t.assert_consistent()


@pytest.mark.parametrize("eviction", list(POLICIES))
def test_the_host_queue_pops_what_a_scan_of_every_node_would_evict(eviction: str):
    """Random traffic through a small pool and host tier: at every point, the queue's next host
    eviction is the host leaf a scan of the whole tree finds first in the policy's order."""
    rng = random.Random(7)
    t = Tiers(host_tokens=24, pool_tokens=16, eviction=eviction)
    stems = [[s * 100 + i for i in range(rng.randint(2, 6))] for s in range(1, 7)]
    for _ in range(60):
        t.serve(rng.choice(stems) + [rng.randint(1000, 1003) for _ in range(rng.randint(0, 3))])
        leaves = [n for n in t.cache.nodes() if n.is_host_leaf()]
        expected = min(leaves, key=lambda n: (t.cache.policy(n), n.node_id), default=None)
        popped = t.cache.host_leaves.pop(TreeNode.is_host_leaf)
        assert popped is expected
        if popped is not None:
            t.cache.host_leaves.push(popped)
        t.assert_consistent()
    assert t.host.evicted_tokens > 0  # the host tier was full: evictions took the queue's order


def test_touches_never_grow_the_host_queue_past_its_bound():
    t = Tiers(host_tokens=64)
    t.serve(A)
    t.cache.evict(100, t.allocator.free)
    for _ in range(3 * COMPACT_SLACK):
        t.cache.match_prefix(A)  # each touch of the host-held node pushes an entry
    assert len(t.cache.host_leaves) <= 2 + COMPACT_SLACK
    assert t.cache.host_leaves.pop(TreeNode.is_host_leaf).key == A
