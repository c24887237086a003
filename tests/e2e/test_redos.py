"""A client's regex cannot stall the server: against a real server, a `stop_regex` that takes
Python's backtracking engine exponential time runs in linear time while a concurrent request
completes as usual, and a pattern the linear-time engine cannot run is a 400 in each API's
error shape before anything is scheduled."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from sglang.ci.servers import RunningServer
from sglang.ci.suites.e2e.openai_errors import assert_openai_error

CATASTROPHIC = ["(.|.)*QQQQ", "(.*)*QQQQ", r"(\w|\w\w|\s)*QQQQ"]
"""Exponential for a backtracking engine on outputs of a few dozen characters (measured before
the fix: the first one stalled the whole server for over 90 s); none matches a story."""
QUICK = {"text": "The capital of France is", "sampling_params": {"max_new_tokens": 8, "temperature": 0}}


def _timed_generate(server: RunningServer, body: dict[str, Any]) -> tuple[httpx.Response, float]:
    with server.client(timeout=120) as client:
        started = time.monotonic()
        response = client.post("/generate", json=body)
        return response, time.monotonic() - started


def test_a_catastrophic_stop_regex_does_not_stall_a_concurrent_request(server: RunningServer) -> None:
    _, usual = _timed_generate(server, QUICK)
    hostile = {
        "text": "Write a long story.",
        "sampling_params": {"max_new_tokens": 32, "ignore_eos": True, "stop_regex": CATASTROPHIC},
    }
    with ThreadPoolExecutor(2) as pool:
        slow = pool.submit(_timed_generate, server, hostile)
        time.sleep(0.5)  # the hostile request is decoding (and checking its patterns) by now
        quick_response, quick_s = pool.submit(_timed_generate, server, QUICK).result()
        hostile_response, _ = slow.result()
    assert quick_response.status_code == 200, quick_response.text
    assert quick_response.json()["meta_info"]["completion_tokens"] == 8
    # Sharing the batch with a 32-token request slows it somewhat; a stall took minutes.
    assert quick_s < max(10 * usual, 15), (quick_s, usual)
    assert hostile_response.status_code == 200, hostile_response.text
    meta = hostile_response.json()["meta_info"]
    # It ran to its length (within the client's timeout: a backtracking engine never returns).
    assert meta["finish_reason"] == {"type": "length", "length": 32}, meta


UNSUPPORTED = ["(?=x)y", r"(a)\1", "(?<!a)b"]
"""Lookarounds and back references: no linear-time engine runs them."""


@pytest.mark.parametrize("pattern", UNSUPPORTED)
def test_a_pattern_the_engine_cannot_run_is_400_on_every_api(http: httpx.Client, pattern: str) -> None:
    native = http.post("/generate", json={"text": "Hi", "sampling_params": {"stop_regex": pattern}})
    error = assert_openai_error(native, 400, "stop_regex")
    assert "RE2" in error["message"], error
    completion = {"prompt": "Hi", "max_tokens": 1, "stop_regex": [pattern]}
    assert_openai_error(http.post("/v1/completions", json=completion), 400, "stop_regex")
    chat = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1, "stop_regex": pattern}
    assert_openai_error(http.post("/v1/chat/completions", json=chat), 400, "stop_regex")
