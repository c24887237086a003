"""Admission: which waiting requests join the running ones at the start of a step.

Waiting requests are considered in the schedule policy's order. One is admitted when the KV pool
(its free pages and what the prefix cache could evict) holds the part of its prompt the cache
does not, beside a reserve for what the running requests will still take; its cached prefix is
matched across the device tier and, with the hierarchical cache, loaded from the lower tiers
first. A request that does not fit stops admission (later ones would take the room it waits
for); one that is only waiting for something else (its grammar, its stored prefix, a prefill of
the same prefix under way, a LoRA slot) is passed over.

Invariants: an admitted request holds a lock on its matched prefix until its KV is released; a
request whose prompt can never fit the pool, or whose grammar failed to compile, is aborted
rather than left waiting; the cached-token counters count a request at its first admission only.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from sglang.runtime.lora.manager import LoraManager
from sglang.runtime.memory.hierarchical_cache import HierarchicalCache, Loaded
from sglang.runtime.memory.radix_cache import MatchResult, RadixCache
from sglang.runtime.memory.token_allocator import PagedTokenAllocator
from sglang.runtime.memory.window_pool import WindowPool
from sglang.runtime.scheduler.policy import admission_order, waits_for_shared_prefill
from sglang.runtime.scheduler.req import Req
from sglang.runtime.server_args import ServerArgs

DECODE_RESERVE_RATIO = 0.3
"""Share of running requests' remaining output tokens kept free when admitting new ones; too
little means more retractions, too much means less batching."""

RESERVE_CLIP_TOKENS = 4096
"""Outputs are usually far shorter than an unbounded `max_new_tokens` (up to the context): the
reserve counts at most this many remaining tokens per request, as SGLang does."""


def promised_tokens(req: Req) -> int:
    """KV tokens a running request will still take: the rest of its prompt (chunked prefill
    allocates it step by step) and a share of its remaining output."""
    remaining = min(req.max_new_tokens - len(req.output_ids), RESERVE_CLIP_TOKENS)
    decode = int(remaining * DECODE_RESERVE_RATIO)
    return len(req.fill_ids) - req.kv_len + decode


def release_lora_slot(lora: LoraManager | None, req: Req) -> None:
    """Gives back the device slot of `req`'s adapter, if it holds one."""
    if lora is not None and req.lora_slot is not None:
        lora.release(req.lora_slot)
    req.lora_slot = None


class Admission:
    """Moves waiting requests that fit into the running list (see the module's docstring)."""

    def __init__(
        self,
        args: ServerArgs,
        cache: RadixCache,
        allocator: PagedTokenAllocator,
        hicache: HierarchicalCache | None,
        lora: LoraManager | None,
        window_pool: WindowPool | None,
        stats: dict[str, int],
        finish: Callable[[Req], None],
    ) -> None:
        """`stats`: the scheduler's counters, whose cached-token ones this adds to; `finish`: how
        an aborted request ends (its update sent, what it holds released)."""
        self.args = args
        self.cache = cache
        self.allocator = allocator
        self.hicache = hicache
        self.lora = lora
        self.window_pool = window_pool
        self.stats = stats
        self.finish = finish

    @property
    def capacity(self) -> int:
        """Tokens the KV pool holds in all (the padding page excluded)."""
        return (self.allocator.num_pages - 1) * self.allocator.page_size

    def admit(self, waiting: list[Req], running: list[Req]) -> None:
        # Free pages are only taken as requests prefill, so what admitted requests will take is
        # counted here, or one step would admit every request that fits on its own.
        reserve = sum(promised_tokens(r) for r in running)
        share_prefills = self.args.schedule_policy == "lpm" and not self.cache.disable
        prefilling = [r.cache_ids(len(r.fill_ids)) for r in running if r.kv_len < len(r.input_ids)]
        prefilling = prefilling if share_prefills else []
        for req in admission_order(waiting, self.args.schedule_policy, self.cache):
            if len(running) >= self.args.max_running_requests:
                break
            if req.grammar_pending():
                continue
            if req.grammar_error is not None:
                waiting.remove(req)
                req.abort(req.grammar_error)
                self.finish(req)
                continue
            limit = len(req.fill_ids) - 1
            if req.wants_input_logprobs():
                limit = min(limit, max(req.logprobs.logprob_start_len - 1, 0))
            match = self._usable_match(req.cache_ids(limit))
            if len(req.fill_ids) + self.allocator.page_size > self.capacity:
                waiting.remove(req)
                req.abort(f"{len(req.fill_ids)} tokens do not fit in the KV cache ({self.capacity} tokens)")
                self.finish(req)
                continue
            loaded = Loaded(match)
            if self.hicache is not None:  # blocks of lower tiers after the device match come back first
                if not self.hicache.ready(req.prefetch):
                    continue
                if not self._fits(req, match, reserve):
                    # Checked before loading: loaded blocks would take pool room, evict the cached
                    # prefixes of requests behind this one, and end its prefetch, only to wait.
                    break
                loaded = self.hicache.load_prefix(req.cache_ids(limit), match, req.prefetch)
                req.prefetch, match = None, loaded.match
            if share_prefills and waits_for_shared_prefill(req.cache_ids(limit), match.num_cached, prefilling):
                continue
            if self.lora is not None:
                req.lora_slot = self.lora.acquire(req.lora_name)
                if req.lora_slot is None:  # every slot holds another running adapter: wait
                    continue
            # Locked first: a cached prefix the request uses can no longer be evicted for it.
            self.cache.inc_lock_ref(match.last_node)
            need = len(req.fill_ids) - match.num_cached + self.allocator.page_size
            if need + reserve > self._available_tokens() or not self._window_room(need, len(running)):
                self.cache.dec_lock_ref(match.last_node)
                release_lora_slot(self.lora, req)
                break
            req.match, req.slots = match, match.slots
            if req.admit_time is None:
                req.admit_time = time.monotonic()
            if not req.output_ids:  # a resumed request keeps its first admission's figure
                self._count_hit(req, loaded)
            waiting.remove(req)
            running.append(req)
            reserve += promised_tokens(req)
            if share_prefills:
                prefilling.append(req.cache_ids(len(req.fill_ids)))

    def _count_hit(self, req: Req, loaded: Loaded) -> None:
        match = loaded.match
        self.cache.record_hit(match.last_node)
        if self.hicache is not None:
            self.hicache.on_hit(match)
        req.cached_tokens = match.num_cached
        req.cached_tokens_details = self.hicache.details(loaded) if self.hicache is not None else None
        self.stats["cached_tokens"] += match.num_cached
        self.stats["device_hit_tokens"] += loaded.device_tokens
        self.stats["host_hit_tokens"] += loaded.host_tokens
        self.stats["storage_hit_tokens"] += loaded.storage_tokens

    def _available_tokens(self) -> int:
        return self.allocator.available_tokens() + self.cache.evictable_size()

    def _fits(self, req: Req, match: MatchResult, reserve: int) -> bool:
        """Whether `req`, with `match` cached, fits beside the `reserve` admitted requests will
        take (its match locked meanwhile: room it uses is no room for it)."""
        self.cache.inc_lock_ref(match.last_node)
        need = len(req.fill_ids) - match.num_cached + self.allocator.page_size
        fits = need + reserve <= self._available_tokens()
        self.cache.dec_lock_ref(match.last_node)
        return fits

    def _window_room(self, need: int, running: int) -> bool:
        """Whether a request with `need` tokens to prefill may join `running` others as far as
        window slots go (a lone request always may: it evicts what it needs). Without this, a
        request admitted into a full window pool is retracted at once, over and over."""
        if self.window_pool is None or not running:
            return True
        first_chunk = min(need, self.args.chunked_prefill_size)
        return self.window_pool.has_room(first_chunk, running)

    def _usable_match(self, ids: list[int]) -> MatchResult:
        """The cached prefix of `ids` a request can extend. With a window pool, only where the
        prefix's last `window` tokens still hold window slots: the radix cache keeps a node's
        full slots, and its window slots only as long as no request freed them (the simplest
        correct rule; a prefix cut short this way is recomputed, never read wrong)."""
        match = self.cache.match_prefix(ids)
        if self.window_pool is None:
            return match
        usable = self.window_pool.usable_prefix(match.slots, self.allocator.page_size)
        return match if usable == match.num_cached else self.cache.match_prefix(ids[:usable])
