"""Prometheus metrics at `GET /metrics`, under two sets of names: ours (`sglang_*`) and
upstream SGLang 0.5.23's (`sglang:*`), which SGLang's routers and dashboards read (smg takes
load from `sglang:token_usage`).

Upstream's names keep upstream's types, labels and histogram buckets, so its dashboards work
unchanged: what upstream's tokenizer manager reports (request counters, TTFT, inter-token and
end-to-end latency) is labelled `model_name`; what its scheduler reports (queue, running
requests, token usage, cache hit rate, queue time, speculative acceptance) is labelled
`model_name`, `engine_type` ("unified"), `tp_rank` and `pp_rank` (the scheduler here is rank 0).

Counters and latency histograms are fed by the tokenizer manager's finish observer (one call
per finished or aborted request); gauges are read from the scheduler at scrape time, so they
are never stale. Upstream's gauges that describe a logging interval (`gen_throughput`) cover
the time since the previous scrape here.
"""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from sglang.runtime.observability.upstream_buckets import (
    E2E_LATENCY_BUCKETS,
    INTER_TOKEN_LATENCY_BUCKETS,
    QUEUE_TIME_BUCKETS,
    TIME_TO_FIRST_TOKEN_BUCKETS,
)
from sglang.runtime.processes.control import SchedulerStatus
from sglang.runtime.processes.messages import RequestMeta

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
"""Our own (`sglang_*`) latency histograms' buckets."""
_LATENCIES = (
    ("ttft", "time_to_first_token_seconds", "Time to first token.", TIME_TO_FIRST_TOKEN_BUCKETS),
    ("itl", "inter_token_latency_seconds", "Gap between output tokens.", INTER_TOKEN_LATENCY_BUCKETS),
    ("e2e_latency", "e2e_request_latency_seconds", "Request latency.", E2E_LATENCY_BUCKETS),
)
_STEP_DOCS = {
    "static_steps": "Model steps replayed from a captured bucket or run as a jitted function.",
    "eager_steps": "Model steps run eagerly.",
    "static_step_fallbacks": "Decode steps too large for the captured buckets' static buffers (rows "
    "sharing long prefixes), run eagerly instead.",
    "verify_steps": "Model steps that verified drafted tokens (speculative decoding).",
    "spec_draft_tokens": "Drafted tokens verified (speculative decoding).",
    "spec_accepted_tokens": "Drafted tokens accepted (speculative decoding).",
    "storage_blocks_written": "KV blocks written to the hierarchical cache's storage tier.",
    "storage_blocks_read": "KV blocks loaded from the storage tier into the device pool.",
    "storage_blocks_rejected": "Stored KV blocks found corrupt, truncated or foreign (recomputed).",
    "storage_write_errors": "KV blocks the storage tier could not write (full or read-only).",
}


def observe_many(histogram: Any, value: float, count: int) -> None:
    """`count` observations of `value` in one step (a long output must not cost one call per
    token): prometheus_client has no weighted observe, so this updates the histogram's sum and
    bucket as its `observe` does, the shortcut upstream SGLang takes too."""
    histogram._sum.inc(value * count)
    bucket = next(i for i, bound in enumerate(histogram._upper_bounds) if value <= bound)
    histogram._buckets[bucket].inc(count)


class ServerMetrics:
    def __init__(self, model_name: str) -> None:
        self.registry = r = CollectorRegistry()
        self.labels = {"model_name": model_name}
        self.scheduler_labels = {"model_name": model_name, "engine_type": "unified", "tp_rank": "0", "pp_rank": "0"}
        names, sched = list(self.labels), list(self.scheduler_labels)

        def upstream(kind: type, name: str, doc: str, scheduler: bool = False, **kw: Any) -> Any:
            labels = self.scheduler_labels if scheduler else self.labels
            return kind(f"sglang:{name}", doc, sched if scheduler else names, registry=r, **kw).labels(**labels)

        def both(kind: type, name: str, theirs: str, doc: str, scheduler: bool = False) -> tuple[Any, Any]:
            return kind(f"sglang_{name}", doc, registry=r), upstream(kind, theirs, doc, scheduler)

        self.requests = Counter("sglang_requests", "Finished requests, by finish reason.", ["reason"], registry=r)
        self.upstream_requests = upstream(Counter, "num_requests", "Number of requests processed.")
        self.aborted = upstream(Counter, "num_aborted_requests", "Requests aborted (client abort or disconnect).")
        self.prompt_tokens = both(Counter, "prompt_tokens", "prompt_tokens", "Prompt tokens of finished requests.")
        self.generation_tokens = both(Counter, "generation_tokens", "generation_tokens", "Generated tokens.")
        self.cached_tokens = both(Counter, "cached_prompt_tokens", "cached_tokens", "Prompt tokens from the cache.")
        self.latencies = {
            key: (
                Histogram(f"sglang_{name}", doc, registry=r, buckets=LATENCY_BUCKETS),
                upstream(Histogram, name, doc, buckets=buckets),
            )
            for key, name, doc, buckets in _LATENCIES
        }
        self.queue_time = upstream(
            Histogram, "queue_time_seconds", "Seconds from arrival to admission.", True, buckets=QUEUE_TIME_BUCKETS
        )
        self.running = both(Gauge, "num_running_requests", "num_running_reqs", "Requests being decoded.", True)
        self.queued = both(Gauge, "num_queued_requests", "num_queue_reqs", "Requests waiting for admission.", True)
        self.kv_usage = Gauge("sglang_kv_cache_usage", "Share of KV cache slots in use (cache included).", registry=r)
        self.token_usage = upstream(
            Gauge, "token_usage", "Share of KV slots held by requests (cache not counted).", True
        )
        self.used_tokens = upstream(Gauge, "num_used_tokens", "KV slots held by requests.", True)
        self.max_total_tokens = upstream(Gauge, "max_total_num_tokens", "KV slots in the pool.", True)
        self.gen_throughput = upstream(
            Gauge, "gen_throughput", "Generated tokens per second since the last scrape.", True
        )
        self.hit_rate = both(Gauge, "cache_hit_rate", "cache_hit_rate", "Share of prompt tokens from the cache.", True)
        self.retracted = upstream(Counter, "num_retracted_requests", "Requests retracted to free KV.", True)
        self.realtime_tokens = Counter(
            "sglang:realtime_tokens", "Tokens processed, by mode: prefill_compute, prefill_cache, decode.",
            [*sched, "mode"], registry=r,
        )  # fmt: skip
        self.step_counts = {key: Counter(f"sglang_{key}", doc, registry=r) for key, doc in _STEP_DOCS.items()}
        self.spec_verify_calls = upstream(Counter, "spec_verify_calls", "Decode steps of speculative requests.")
        self.spec_accept_length = upstream(Gauge, "spec_accept_length", "Mean tokens a decode step adds.", True)
        self.spec_accept_rate = upstream(Gauge, "spec_accept_rate", "Share of drafted tokens accepted.", True)
        self.tier_hit_tokens = Gauge(
            "sglang_cache_hit_tokens", "Prompt tokens served from each cache tier since start.", ["tier"], registry=r
        )
        self.tier_hit_rate = Gauge(
            "sglang_cache_tier_hit_rate", "Share of prompt tokens served from each cache tier.", ["tier"], registry=r
        )
        self._seen: dict[str, int] = {}
        """Scheduler totals at the previous scrape: counters move forward by the difference."""
        self._last_scrape = time.monotonic()

    def observe_finished(self, meta: dict[str, Any], latest: RequestMeta | None = None) -> None:
        """One finished or aborted request: its `meta_info`, and its last `RequestMeta` (which
        carries the queue time) when the scheduler answered it."""
        reason = (meta.get("finish_reason") or {}).get("type", "unknown")
        self.requests.labels(reason=reason).inc()
        self.upstream_requests.inc()
        if reason == "abort":
            self.aborted.inc()
        for key, pair in (
            ("prompt_tokens", self.prompt_tokens),
            ("completion_tokens", self.generation_tokens),
            ("cached_tokens", self.cached_tokens),
        ):
            for counter in pair:
                counter.inc(meta.get(key, 0))
        for key, (ours, theirs) in self.latencies.items():
            if key in meta:
                ours.observe(meta[key])
                if key == "itl":  # as upstream, every gap between tokens is one observation
                    observe_many(theirs, meta[key], meta["completion_tokens"] - 1)
                else:
                    theirs.observe(meta[key])
        if latest is not None and latest.queue_time is not None:
            self.queue_time.observe(latest.queue_time)

    def _advance(self, counter: Any, key: str, total: int) -> None:
        counter.inc(max(total - self._seen.get(key, 0), 0))
        self._seen[key] = total

    def render(self, status: SchedulerStatus) -> bytes:
        total = max(status.kv_tokens_total, 1)
        used = status.kv_tokens_in_use - status.kv_tokens_evictable
        prompt = status.prompt_tokens + status.cached_tokens
        for pair, value in (
            (self.running, status.num_running_requests),
            (self.queued, status.num_waiting_requests),
            (self.hit_rate, status.cached_tokens / prompt if prompt else 0.0),
        ):
            for gauge in pair:
                gauge.set(value)
        self.kv_usage.set(status.kv_tokens_in_use / total)
        self.token_usage.set(used / total)
        self.used_tokens.set(used)
        self.max_total_tokens.set(status.kv_tokens_total)
        now = time.monotonic()
        # Read before the realtime-token counters below record this scrape's total.
        generated = status.generation_tokens - self._seen.get("generation_tokens", 0)
        self.gen_throughput.set(max(generated, 0) / max(now - self._last_scrape, 1e-9))
        self._last_scrape = now
        for mode, key in (
            ("prefill_compute", "prompt_tokens"),
            ("prefill_cache", "cached_tokens"),
            ("decode", "generation_tokens"),
        ):
            self._advance(self.realtime_tokens.labels(**self.scheduler_labels, mode=mode), key, getattr(status, key))
        self._advance(self.retracted, "retractions", status.retractions)
        for tier in ("device", "host", "storage"):
            hits = getattr(status, f"{tier}_hit_tokens")
            self.tier_hit_tokens.labels(tier=tier).set(hits)
            self.tier_hit_rate.labels(tier=tier).set(hits / prompt if prompt else 0.0)
        for key, counter in self.step_counts.items():
            self._advance(counter, key, getattr(status, key))
        self._render_speculative(status)
        return generate_latest(self.registry)

    def _render_speculative(self, status: SchedulerStatus) -> None:
        """Upstream's speculative metrics, over the server's lifetime (upstream's gauges are per
        logging interval; a lifetime mean is what a scrape at any time can state exactly)."""
        self._advance(self.spec_verify_calls, "spec_verify_ct", status.spec_verify_ct)
        if status.spec_verify_ct:
            self.spec_accept_length.set(1 + status.spec_accepted_tokens / status.spec_verify_ct)
        if status.spec_draft_tokens:
            self.spec_accept_rate.set(status.spec_accepted_tokens / status.spec_draft_tokens)
