"""`--radix-eviction-policy`: each policy's eviction order on one scripted access sequence, the
order in which split and parent nodes leave, and the flag's validation."""

from __future__ import annotations

import pytest
import torch

from sglang.runtime.memory.eviction import POLICIES
from sglang.runtime.memory.radix_cache import RadixCache, TreeNode
from sglang.runtime.server_args import ServerArgs

PRIORITIES = {"A": 2, "B": 3, "C": 1, "D": 2}
"""Request priority of the request that cached each prefix."""

SCRIPT = [("probe", "D"), ("hit", "B"), ("hit", "C"), ("hit", "B"), ("probe", "D")]
"""After inserting A, B, C, D in that order: a probe is a match that admits nothing (the lpm
admission order looks at every waiting request), a hit is a request admitted with the prefix.
Resulting state: A (touched 1, 0 hits), B (8, 2 hits), C (7, 1 hit), D (9, 0 hits)."""

EXPECTED = {
    "lru": "ACBD",  # by last touch: 1, 7, 8, 9
    "lfu": "ADCB",  # by hits (0, 0, 1, 2), ties by last touch (A 1 before D 9)
    "fifo": "ABCD",  # by insertion
    "mru": "DBCA",  # most recently touched first
    "filo": "DCBA",  # last inserted first
    "priority": "CADB",  # priorities 1, 2, 2, 3; A and D tie on 2 and go by last touch
    "slru": "ACDB",  # B (2 hits) is protected; the probationary rest by last touch
}

TOKEN = {name: i + 1 for i, name in enumerate("ABCD")}


def _scripted_cache(policy: str) -> RadixCache:
    cache = RadixCache(eviction=policy)
    for name, priority in PRIORITIES.items():
        t = TOKEN[name]
        cache.insert([t, t], torch.tensor([2 * t, 2 * t + 1]), priority=priority)
    for kind, name in SCRIPT:
        match = cache.match_prefix([TOKEN[name]] * 2)
        assert match.num_cached == 2
        if kind == "hit":
            cache.record_hit(match.last_node)
    return cache


def _eviction_order(cache: RadixCache) -> str:
    names = {2 * t: name for name, t in TOKEN.items()}
    order: list[str] = []
    while cache.evictable_size():
        assert cache.evict(1, lambda s: order.append(names[int(s[0])])) == 2
    return "".join(order)


def test_expected_orders_tell_every_policy_apart():
    assert set(EXPECTED) == set(POLICIES)
    assert len(set(EXPECTED.values())) == len(EXPECTED)


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_each_policy_evicts_in_its_order(policy: str):
    assert _eviction_order(_scripted_cache(policy)) == EXPECTED[policy]


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_locked_prefixes_are_skipped_and_the_rest_keep_their_order(policy: str):
    cache = _scripted_cache(policy)
    first = EXPECTED[policy][0]
    locked = cache.match_prefix([TOKEN[first]] * 2).last_node
    cache.inc_lock_ref(locked)
    order: list[str] = []
    names = {2 * t: name for name, t in TOKEN.items()}
    cache.evict(100, lambda s: order.extend(names[int(x)] for x in s[::2]))
    assert "".join(order) == EXPECTED[policy][1:]
    assert cache.total_size() == cache.protected_size() == 2


def test_split_halves_keep_their_history_and_parents_follow_their_children():
    cache = RadixCache(eviction="fifo")
    cache.insert([1, 2, 3, 4], torch.tensor([1, 2, 3, 4]))  # created first
    cache.insert([9], torch.tensor([9]))
    cache.insert([1, 2, 7], torch.tensor([5, 6, 7]))  # splits [1,2,3,4]: the head keeps its age
    seen: list[list[int]] = []
    cache.on_evict = lambda node: seen.append(cache.prefix_tokens(node))
    freed: list[int] = []
    cache.evict(100, lambda s: freed.extend(s.tolist()))
    # [3,4] is the oldest leaf; then [1,2] is not yet a leaf, so [9]; [7] came last, then [1,2].
    assert seen == [[1, 2, 3, 4], [9], [1, 2, 7], [1, 2]]
    assert sorted(freed) == [1, 2, 3, 4, 7, 9] and cache.total_size() == 0


def test_hits_count_on_the_whole_path():
    cache = RadixCache(eviction="lfu")
    cache.insert([1, 2, 3], torch.tensor([1, 2, 3]))
    node = cache.match_prefix([1, 2]).last_node
    cache.record_hit(cache.match_prefix([1, 2, 3]).last_node)
    assert isinstance(node, TreeNode) and node.hit_count == 1
    assert next(iter(node.children.values())).hit_count == 1


def test_the_flag_takes_upstreams_names_and_rejects_others():
    assert ServerArgs().radix_eviction_policy == "lru"
    for name in ("lru", "lfu", "slru", "priority", "fifo"):
        assert ServerArgs(radix_eviction_policy=name).radix_eviction_policy == name
    with pytest.raises(ValueError, match="radix_eviction_policy"):
        ServerArgs(radix_eviction_policy="random")
