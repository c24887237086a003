"""Prometheus metrics at `GET /metrics`.

Counters and latency histograms are fed by the tokenizer manager's finish observer (one call
per finished request); gauges (running, queued, KV usage, cache hit rate) are read from the
scheduler at scrape time, so they are never stale.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class ServerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("sglang_requests", "Finished requests, by finish reason.", ["reason"], registry=r)
        self.prompt_tokens = Counter("sglang_prompt_tokens", "Prompt tokens of finished requests.", registry=r)
        self.generation_tokens = Counter("sglang_generation_tokens", "Generated tokens.", registry=r)
        self.cached_tokens = Counter("sglang_cached_prompt_tokens", "Prompt tokens served from the cache.", registry=r)
        self.ttft = Histogram("sglang_time_to_first_token_seconds", "Time to first token.", buckets=LATENCY_BUCKETS,
                              registry=r)  # fmt: skip
        self.itl = Histogram("sglang_inter_token_latency_seconds", "Mean gap between output tokens.",
                             buckets=LATENCY_BUCKETS, registry=r)  # fmt: skip
        self.e2e = Histogram("sglang_e2e_request_latency_seconds", "Request latency.", buckets=LATENCY_BUCKETS,
                             registry=r)  # fmt: skip
        self.running = Gauge("sglang_num_running_requests", "Requests being decoded.", registry=r)
        self.queued = Gauge("sglang_num_queued_requests", "Requests waiting for admission.", registry=r)
        self.kv_usage = Gauge("sglang_kv_cache_usage", "Share of KV cache slots in use (cache included).", registry=r)
        self.hit_rate = Gauge("sglang_cache_hit_rate", "Share of prompt tokens served from the prefix cache.",
                              registry=r)  # fmt: skip

    def observe_finished(self, meta: dict[str, Any]) -> None:
        reason = (meta.get("finish_reason") or {}).get("type", "unknown")
        self.requests.labels(reason=reason).inc()
        self.prompt_tokens.inc(meta.get("prompt_tokens", 0))
        self.generation_tokens.inc(meta.get("completion_tokens", 0))
        self.cached_tokens.inc(meta.get("cached_tokens", 0))
        for key, histogram in (("ttft", self.ttft), ("itl", self.itl), ("e2e_latency", self.e2e)):
            if key in meta:
                histogram.observe(meta[key])

    def render(self, server_info: dict[str, Any]) -> bytes:
        self.running.set(server_info["num_running_requests"])
        self.queued.set(server_info["num_waiting_requests"])
        self.kv_usage.set(server_info["kv_tokens_in_use"] / max(server_info["kv_tokens_total"], 1))
        prompt = server_info["prompt_tokens"] + server_info["cached_tokens"]
        self.hit_rate.set(server_info["cached_tokens"] / prompt if prompt else 0.0)
        return generate_latest(self.registry)
