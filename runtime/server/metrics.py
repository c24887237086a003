"""Prometheus metrics at `GET /metrics`, under two sets of names: ours (`sglang_*`) and
upstream SGLang's (`sglang:*`, labelled with `model_name`), which SGLang's routers and
dashboards read (smg takes load from `sglang:token_usage`).

Counters and latency histograms are fed by the tokenizer manager's finish observer (one call
per finished or aborted request); gauges (running, queued, KV usage, cache hit rate) are read
from the scheduler at scrape time, so they are never stale.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from sglang.runtime.processes.control import SchedulerStatus

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
_LATENCIES = (
    ("ttft", "time_to_first_token_seconds", "Time to first token."),
    ("itl", "inter_token_latency_seconds", "Mean gap between output tokens."),
    ("e2e_latency", "e2e_request_latency_seconds", "Request latency."),
)


class ServerMetrics:
    def __init__(self, model_name: str) -> None:
        self.registry = r = CollectorRegistry()
        self.labels = {"model_name": model_name}
        names = list(self.labels)

        def both(kind: type, name: str, upstream: str, doc: str, **kw: Any) -> tuple[Any, Any]:
            ours = kind(f"sglang_{name}", doc, registry=r, **kw)
            theirs = kind(f"sglang:{upstream}", doc, names, registry=r, **kw).labels(**self.labels)
            return ours, theirs

        self.requests = Counter("sglang_requests", "Finished requests, by finish reason.", ["reason"], registry=r)
        self.upstream_requests = Counter("sglang:num_requests", "Finished requests.", names, registry=r).labels(
            **self.labels
        )
        self.aborted = Counter(
            "sglang:num_aborted_requests", "Aborted requests (client abort or disconnect).", names, registry=r
        ).labels(**self.labels)
        self.prompt_tokens = both(Counter, "prompt_tokens", "prompt_tokens", "Prompt tokens of finished requests.")
        self.generation_tokens = both(Counter, "generation_tokens", "generation_tokens", "Generated tokens.")
        self.cached_tokens = both(Counter, "cached_prompt_tokens", "cached_tokens", "Prompt tokens from the cache.")
        self.latencies = {
            key: both(Histogram, name, name, doc, buckets=LATENCY_BUCKETS) for key, name, doc in _LATENCIES
        }
        self.running = both(Gauge, "num_running_requests", "num_running_reqs", "Requests being decoded.")
        self.queued = both(Gauge, "num_queued_requests", "num_queue_reqs", "Requests waiting for admission.")
        self.kv_usage = Gauge("sglang_kv_cache_usage", "Share of KV cache slots in use (cache included).", registry=r)
        self.token_usage = Gauge(
            "sglang:token_usage", "Share of KV slots held by requests (cache not counted).", names, registry=r
        ).labels(**self.labels)
        self.used_tokens = Gauge("sglang:num_used_tokens", "KV slots held by requests.", names, registry=r).labels(
            **self.labels
        )
        self.hit_rate = both(Gauge, "cache_hit_rate", "cache_hit_rate", "Share of prompt tokens from the cache.")
        step_docs = {
            "static_steps": "Model steps replayed from a captured bucket or run as a jitted function.",
            "eager_steps": "Model steps run eagerly.",
            "static_step_fallbacks": "Decode steps too large for the captured buckets' static buffers (rows "
            "sharing long prefixes), run eagerly instead.",
        }
        step_docs |= {
            "verify_steps": "Model steps that verified drafted tokens (speculative decoding).",
            "spec_draft_tokens": "Drafted tokens verified (speculative decoding).",
            "spec_accepted_tokens": "Drafted tokens accepted (speculative decoding).",
        }
        step_docs |= {
            "storage_blocks_written": "KV blocks written to the hierarchical cache's storage tier.",
            "storage_blocks_read": "KV blocks loaded from the storage tier into the device pool.",
            "storage_blocks_rejected": "Stored KV blocks found corrupt, truncated or foreign (recomputed).",
            "storage_write_errors": "KV blocks the storage tier could not write (full or read-only).",
        }
        self.step_counts = {key: Counter(f"sglang_{key}", doc, registry=r) for key, doc in step_docs.items()}
        self.spec_verify_calls = Counter(
            "sglang:spec_verify_calls", "Decode steps of requests with speculative decoding on.", names, registry=r
        ).labels(**self.labels)
        self.spec_accept_length = Gauge(
            "sglang:spec_accept_length", "Mean tokens a decode step adds (accepted drafts + 1).", names, registry=r
        ).labels(**self.labels)
        self.spec_accept_rate = Gauge(
            "sglang:spec_accept_rate", "Share of drafted tokens accepted.", names, registry=r
        ).labels(**self.labels)
        self._spec_verify_seen = 0
        self.tier_hit_tokens = Gauge(
            "sglang_cache_hit_tokens", "Prompt tokens served from each cache tier since start.", ["tier"], registry=r
        )
        self.tier_hit_rate = Gauge(
            "sglang_cache_tier_hit_rate", "Share of prompt tokens served from each cache tier.", ["tier"], registry=r
        )
        self._step_counts_seen = dict.fromkeys(self.step_counts, 0)

    def observe_finished(self, meta: dict[str, Any]) -> None:
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
        for key, pair in self.latencies.items():
            if key in meta:
                for histogram in pair:
                    histogram.observe(meta[key])

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
        host, storage = status.host_hit_tokens, status.storage_hit_tokens
        tiers = (("device", status.cached_tokens - host - storage), ("host", host), ("storage", storage))
        for tier, hits in tiers:
            self.tier_hit_tokens.labels(tier=tier).set(hits)
            self.tier_hit_rate.labels(tier=tier).set(hits / prompt if prompt else 0.0)
        for key, counter in self.step_counts.items():
            # The scheduler keeps running totals; a counter only moves forward by the difference.
            count = getattr(status, key)
            counter.inc(max(count - self._step_counts_seen[key], 0))
            self._step_counts_seen[key] = count
        self._render_speculative(status)
        return generate_latest(self.registry)

    def _render_speculative(self, status: SchedulerStatus) -> None:
        """Upstream's speculative metrics, over the server's lifetime (upstream's gauges are per
        logging interval; a lifetime mean is what a scrape at any time can state exactly)."""
        self.spec_verify_calls.inc(max(status.spec_verify_ct - self._spec_verify_seen, 0))
        self._spec_verify_seen = status.spec_verify_ct
        if status.spec_verify_ct:
            self.spec_accept_length.set(1 + status.spec_accepted_tokens / status.spec_verify_ct)
        if status.spec_draft_tokens:
            self.spec_accept_rate.set(status.spec_accepted_tokens / status.spec_draft_tokens)
