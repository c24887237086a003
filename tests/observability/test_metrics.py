"""`/metrics` under upstream SGLang's names, types, labels and histogram buckets, parsed with
`prometheus_client`'s own parser while a load keeps the waiting queue non-empty."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from sglang.runtime.observability.upstream_buckets import (
    E2E_LATENCY_BUCKETS,
    INTER_TOKEN_LATENCY_BUCKETS,
    QUEUE_TIME_BUCKETS,
    TIME_TO_FIRST_TOKEN_BUCKETS,
)

from .conftest import MAX_RUNNING

REQUEST_LABELS = {"model_name"}
SCHEDULER_LABELS = {"model_name", "engine_type", "tp_rank", "pp_rank"}
FAMILIES = {
    # name: (type, labels)
    "sglang:num_running_reqs": ("gauge", SCHEDULER_LABELS),
    "sglang:num_queue_reqs": ("gauge", SCHEDULER_LABELS),
    "sglang:token_usage": ("gauge", SCHEDULER_LABELS),
    "sglang:num_used_tokens": ("gauge", SCHEDULER_LABELS),
    "sglang:max_total_num_tokens": ("gauge", SCHEDULER_LABELS),
    "sglang:gen_throughput": ("gauge", SCHEDULER_LABELS),
    "sglang:cache_hit_rate": ("gauge", SCHEDULER_LABELS),
    "sglang:spec_accept_length": ("gauge", SCHEDULER_LABELS),
    "sglang:spec_accept_rate": ("gauge", SCHEDULER_LABELS),
    "sglang:queue_time_seconds": ("histogram", SCHEDULER_LABELS),
    "sglang:num_retracted_requests": ("counter", SCHEDULER_LABELS),
    "sglang:realtime_tokens": ("counter", SCHEDULER_LABELS | {"mode"}),
    "sglang:num_requests": ("counter", REQUEST_LABELS),
    "sglang:num_aborted_requests": ("counter", REQUEST_LABELS),
    "sglang:prompt_tokens": ("counter", REQUEST_LABELS),
    "sglang:generation_tokens": ("counter", REQUEST_LABELS),
    "sglang:cached_tokens": ("counter", REQUEST_LABELS),
    "sglang:time_to_first_token_seconds": ("histogram", REQUEST_LABELS),
    "sglang:inter_token_latency_seconds": ("histogram", REQUEST_LABELS),
    "sglang:e2e_request_latency_seconds": ("histogram", REQUEST_LABELS),
}
BUCKETS = {
    "sglang:time_to_first_token_seconds": TIME_TO_FIRST_TOKEN_BUCKETS,
    "sglang:inter_token_latency_seconds": INTER_TOKEN_LATENCY_BUCKETS,
    "sglang:e2e_request_latency_seconds": E2E_LATENCY_BUCKETS,
    "sglang:queue_time_seconds": QUEUE_TIME_BUCKETS,
}
LOAD = MAX_RUNNING + 2
NEW_TOKENS = 12


def scrape(http: httpx.Client) -> dict[str, Any]:
    response = http.get("/metrics")
    response.raise_for_status()
    return {family.name: family for family in text_string_to_metric_families(response.text)}


def value(families: dict[str, Any], name: str, suffix: str = "") -> float:
    return sum(s.value for s in families[name].samples if s.name == name + suffix)


def queued(families: dict[str, Any]) -> float:
    return value(families, "sglang:num_queue_reqs")


def test_upstream_families_under_a_queue(http: httpx.Client) -> None:
    before = scrape(http)
    body = {"text": "Count to ten:", "sampling_params": {"max_new_tokens": NEW_TOKENS, "ignore_eos": True}}
    results: list[dict[str, Any]] = []
    threads = [
        threading.Thread(target=lambda: results.append(http.post("/generate", json=body).json())) for _ in range(LOAD)
    ]
    for thread in threads:
        thread.start()
    full: dict[str, Any] = {}
    """A scrape that saw a full running batch and requests waiting."""
    deadline = time.monotonic() + 120
    while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
        families = scrape(http)
        if queued(families) >= 1 and value(families, "sglang:num_running_reqs") == MAX_RUNNING:
            full = families
        time.sleep(0.02)  # leave the server's cores to the load
    for thread in threads:
        thread.join()
    assert len(results) == LOAD and all(r["meta_info"]["completion_tokens"] == NEW_TOKENS for r in results)
    assert full, "no scrape saw a full running batch with requests waiting"
    assert 0 < value(full, "sglang:token_usage") <= 1
    assert value(full, "sglang:num_used_tokens") > 0

    after = scrape(http)
    for name, (kind, labels) in FAMILIES.items():
        family = after.get(name)
        assert family is not None, name
        assert family.type == kind, name
        for sample in family.samples:
            assert set(sample.labels) - {"le"} == labels, (name, sample.labels)
    for name, bounds in BUCKETS.items():
        les = [s.labels["le"] for s in after[name].samples if s.name == f"{name}_bucket"]
        assert les == [*(str(float(b)) for b in bounds), "+Inf"], name
    grew = lambda name, suffix: value(after, name, suffix) - value(before, name, suffix)
    assert grew("sglang:num_requests", "_total") == LOAD
    assert grew("sglang:generation_tokens", "_total") == LOAD * NEW_TOKENS
    assert grew("sglang:queue_time_seconds", "_count") == LOAD
    assert grew("sglang:queue_time_seconds", "_sum") > 0  # the queued ones waited
    # As upstream, one inter-token observation per gap between a request's tokens.
    assert grew("sglang:inter_token_latency_seconds", "_count") == LOAD * (NEW_TOKENS - 1)
    assert grew("sglang:time_to_first_token_seconds", "_count") == LOAD
    assert value(after, "sglang:max_total_num_tokens") >= 4096
