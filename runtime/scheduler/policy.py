"""The order in which waiting requests are admitted.

`lpm` (longest prefix match) admits first the requests with the most tokens already in the
prefix cache, so requests sharing a prefix run while it is cached; `fcfs` admits by arrival.
Both honour `priority` first (higher first). Past `LPM_QUEUE_LIMIT` waiting requests, matching
every one each step costs more than it saves, and `lpm` falls back to `fcfs`.

Under `lpm`, requests that arrive together and share a long prefix nobody has cached yet are not
prefilled side by side: one computes the prefix, the others wait until it is in the prefix cache
(SGLang's in-batch prefix caching), so the prefix is computed once.
"""

from __future__ import annotations

from sglang.runtime.memory.radix_cache import RadixCache
from sglang.runtime.scheduler.req import Req

LPM_QUEUE_LIMIT = 128
IN_BATCH_PREFIX_MIN = 32
"""Shared uncached tokens past which a request waits for another's prefill (SGLang's value)."""


def admission_order(waiting: list[Req], policy: str, cache: RadixCache) -> list[Req]:
    if policy == "lpm" and len(waiting) <= LPM_QUEUE_LIMIT and not cache.disable:
        cached = {id(r): cache.match_prefix(r.cache_ids(len(r.fill_ids) - 1)).num_cached for r in waiting}
        return sorted(waiting, key=lambda r: (-r.priority, -cached[id(r)], r.arrival_time))
    return sorted(waiting, key=lambda r: (-r.priority, r.arrival_time))


def common_prefix_len(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix (binary search over slice comparisons, which run at C
    speed: O(n log n) element comparisons, no Python loop over tokens)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def waits_for_shared_prefill(tokens: list[int], num_cached: int, prefilling: list[list[int]]) -> bool:
    """True when `tokens` (the part of a prompt that could come from the cache, of which
    `num_cached` does) shares more than `IN_BATCH_PREFIX_MIN` further tokens with a prompt being
    prefilled: admitted once that prefill is cached, the request computes only what differs."""
    shared = max((common_prefix_len(tokens, ids) for ids in prefilling), default=0)
    return shared - num_cached > IN_BATCH_PREFIX_MIN
