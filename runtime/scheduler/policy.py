"""The order in which waiting requests are admitted.

`lpm` (longest prefix match) admits first the requests with the most tokens already in the
prefix cache, so requests sharing a prefix run while it is cached; `fcfs` admits by arrival.
Both honour `priority` first (higher first). Past `LPM_QUEUE_LIMIT` waiting requests, matching
every one each step costs more than it saves, and `lpm` falls back to `fcfs`.
"""

from __future__ import annotations

from sglang.runtime.radix_cache import RadixCache
from sglang.runtime.scheduler.req import Req

LPM_QUEUE_LIMIT = 128


def admission_order(waiting: list[Req], policy: str, cache: RadixCache) -> list[Req]:
    if policy == "lpm" and len(waiting) <= LPM_QUEUE_LIMIT and not cache.disable:
        cached = {id(r): cache.match_prefix(r.fill_ids[:-1]).num_cached for r in waiting}
        return sorted(waiting, key=lambda r: (-r.priority, -cached[id(r)], r.arrival_time))
    return sorted(waiting, key=lambda r: (-r.priority, r.arrival_time))
