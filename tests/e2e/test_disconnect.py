"""A client that goes away frees its request's KV at once: a stream closed mid-way, or a
non-streaming request whose client timed out, stops decoding (long before its 2000 tokens) and
the KV in use returns to its baseline. Tokens the prefix cache keeps are not in use by anyone:
the comparison is on `kv_tokens_in_use - kv_tokens_cached`."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from sglang.ci.servers import RunningServer, sse_events, wait_until

LONG = 2000
"""Tokens a test request asks for: minutes of decoding, so only an abort ends it in time."""
FREED_WITHIN_S = 30.0


def held_kv(info: dict[str, Any]) -> int:
    """KV tokens held by requests (the prefix cache's share excluded)."""
    return info["kv_tokens_in_use"] - info["kv_tokens_cached"]


def idle_baseline(server: RunningServer) -> int:
    """KV held once nothing runs or waits."""
    info = wait_until(lambda: (i := server.server_info())["num_running_requests"] == 0 and i, timeout=60)
    assert info["num_waiting_requests"] == 0
    return held_kv(info)


def assert_freed(server: RunningServer, baseline: int) -> None:
    def freed() -> bool:
        info = server.server_info()
        return info["num_running_requests"] == 0 and info["num_waiting_requests"] == 0 and held_kv(info) == baseline

    wait_until(freed, timeout=FREED_WITHIN_S)


LONG_NATIVE = {"text": "Tell me everything.", "sampling_params": {"max_new_tokens": LONG, "ignore_eos": True}}
LONG_CHAT = {"messages": [{"role": "user", "content": "Tell me everything."}], "max_tokens": LONG, "ignore_eos": True}


@pytest.mark.parametrize(
    ("path", "body"),
    [("/generate", {**LONG_NATIVE, "stream": True}), ("/v1/chat/completions", {**LONG_CHAT, "stream": True})],
    ids=["native", "openai"],
)
def test_disconnect_mid_stream_frees_kv(server: RunningServer, path: str, body: dict[str, Any]) -> None:
    baseline = idle_baseline(server)
    with server.client() as client, client.stream("POST", path, json=body) as response:
        assert response.status_code == 200
        events = sse_events(response.iter_lines())
        for _ in range(3):
            assert next(events) != "[DONE]"
        info = server.server_info()
        assert info["num_running_requests"] == 1
        assert held_kv(info) > baseline
    # The connection is closed here, ~3 tokens into 2000.
    assert_freed(server, baseline)


def run_in_thread(call: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """Runs `call` on a thread; its result or exception lands in the returned dict."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["result"] = call()
        except Exception as e:
            outcome["error"] = e

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, outcome


@pytest.mark.parametrize(
    ("path", "body"),
    [
        pytest.param("/generate", LONG_NATIVE, id="native"),
        pytest.param("/v1/chat/completions", LONG_CHAT, id="openai"),
    ],
)
def test_client_timeout_frees_kv(server: RunningServer, path: str, body: dict[str, Any]) -> None:
    baseline = idle_baseline(server)

    def impatient_request() -> httpx.Response:
        with httpx.Client(base_url=server.url, headers=server.headers, timeout=4.0) as client:
            return client.post(path, json=body)

    thread, outcome = run_in_thread(impatient_request)
    wait_until(lambda: server.server_info()["num_running_requests"] == 1, timeout=10, interval=0.05)
    thread.join(timeout=30)
    assert isinstance(outcome.get("error"), httpx.ReadTimeout), outcome
    assert_freed(server, baseline)
