"""OpenTelemetry tracing end to end: a real server exports OTLP/HTTP to a receiver the test
runs, and every stage's span of a request hangs under the `traceparent` the client sent, on
every generation route. Also: tracing off costs nothing (the SDK and exporters are never
imported; the OpenTelemetry API may be, by other libraries)."""

from __future__ import annotations

import importlib
import itertools
import secrets
import sys
from typing import Any

import httpx
import pytest

from sglang.runtime.observability.tracing import StageTracer
from sglang.runtime.server_args import ServerArgs

from .otlp_receiver import OtlpReceiver, ReceivedSpan

STAGES = {"receive", "tokenize", "queue", "prefill", "decode", "detokenize"}
PROCESSES = {
    "sglang.request": "tokenizer_manager",
    "receive": "tokenizer_manager",
    "tokenize": "tokenizer_manager",
    "queue": "scheduler",
    "prefill": "scheduler",
    "decode": "scheduler",
    "detokenize": "detokenizer",
}


def new_traceparent() -> tuple[str, str, str]:
    """A W3C traceparent of a sampled client span: (header, trace id, span id)."""
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return f"00-{trace_id}-{span_id}-01", trace_id, span_id


def request_spans(receiver: OtlpReceiver, trace_id: str) -> dict[str, ReceivedSpan]:
    spans = receiver.trace(trace_id, {"sglang.request", *STAGES})
    by_name = {s.name: s for s in spans}
    assert set(by_name) >= {"sglang.request", *STAGES}, sorted(by_name)
    return by_name


def check_tree(spans: dict[str, ReceivedSpan], client_span: str) -> None:
    root = spans["sglang.request"]
    assert root.parent_span_id == client_span
    for name in STAGES:
        assert spans[name].parent_span_id == root.span_id, name
    for name, process in PROCESSES.items():
        assert spans[name].process == process, name


ROUTES: list[tuple[str, dict[str, Any]]] = [
    ("/v1/completions", {"model": "default", "prompt": "Hello", "max_tokens": 3}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3}),
    ("/v1/messages", {"model": "default", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3}),
    ("/api/generate", {"model": "default", "prompt": "Hello", "stream": False, "options": {"num_predict": 3}}),
    (
        "/api/chat",
        {
            "model": "default",
            "messages": [{"role": "user", "content": "Hi"}],
            "stream": False,
            "options": {"num_predict": 3},
        },
    ),
]


def test_native_generate_stages_under_client_span(http: httpx.Client, receiver: OtlpReceiver) -> None:
    header, trace_id, span_id = new_traceparent()
    body = {"text": "The capital of France is", "sampling_params": {"max_new_tokens": 4, "ignore_eos": True}}
    response = http.post("/generate", json=body, headers={"traceparent": header})
    assert response.status_code == 200, response.text
    spans = request_spans(receiver, trace_id)
    check_tree(spans, span_id)
    # The stages follow one another (the scheduler converts its monotonic stamps to wall time).
    slack = 5_000_000
    order = [spans[name] for name in ("queue", "prefill", "decode")]
    assert spans["tokenize"].end_ns <= order[0].start_ns + slack
    for earlier, later in itertools.pairwise(order):
        assert earlier.end_ns <= later.start_ns + slack
    assert spans["sglang.request"].start_ns <= spans["receive"].start_ns
    assert spans["decode"].attributes["completion_tokens"] == 4
    assert spans["decode"].attributes["finish_reason"] == "length"
    assert spans["prefill"].attributes["prompt_tokens"] == response.json()["meta_info"]["prompt_tokens"]


@pytest.mark.parametrize(("path", "body"), ROUTES, ids=[path for path, _ in ROUTES])
def test_every_route_parents_on_traceparent(
    http: httpx.Client, receiver: OtlpReceiver, path: str, body: dict[str, Any]
) -> None:
    header, trace_id, span_id = new_traceparent()
    response = http.post(path, json=body, headers={"traceparent": header})
    assert response.status_code == 200, response.text
    check_tree(request_spans(receiver, trace_id), span_id)


def test_without_traceparent_a_new_trace(http: httpx.Client, receiver: OtlpReceiver) -> None:
    rid = secrets.token_hex(8)
    body = {"text": "Hi", "rid": rid, "sampling_params": {"max_new_tokens": 1}}
    assert http.post("/generate", json=body).status_code == 200
    tokenize = receiver.first(lambda s: s.name == "tokenize" and s.attributes.get("sglang.rid") == rid)
    spans = request_spans(receiver, tokenize.trace_id)
    assert spans["sglang.request"].parent_span_id == ""


def test_tracing_off_imports_no_sdk() -> None:
    # Every module a server runs with tracing off, imported here: none may pull in the SDK.
    for module in (
        "sglang.runtime.server.app",
        "sglang.runtime.scheduler.process",
        "sglang.runtime.processes.detokenizer",
        "sglang.runtime.observability.stage_spans",
    ):
        importlib.import_module(module)
    assert ServerArgs().trace_config("scheduler") is None
    assert StageTracer.start(None) is None
    assert not [m for m in sys.modules if m.startswith(("opentelemetry.sdk", "opentelemetry.exporter"))]
