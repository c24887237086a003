"""Bounded work per request, against a real server: a body over `--max-request-bytes` is
refused with 413 before it is parsed (from its Content-Length, or while a chunked one streams
in), a text that cannot fit the context is refused before it is tokenized in full, so is a
max_new_tokens past it (in upstream's words, which clients match), `rid`, `stream` and
`sampling_params` must have their types, and disconnect aborts are counted in the metrics."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import httpx
import pytest

from sglang.ci.servers import RunningServer, sse_events, wait_until
from sglang.ci.suites.e2e.openai_errors import assert_openai_error

DEFAULT_LIMIT = 16 << 20
JSON = {"content-type": "application/json"}


def _body(text_bytes: int) -> bytes:
    return json.dumps({"text": "word " * (text_bytes // 5), "sampling_params": {"max_new_tokens": 1}}).encode()


def _chunks(body: bytes, size: int = 1 << 16) -> Iterator[bytes]:
    for i in range(0, len(body), size):
        yield body[i : i + size]


@pytest.mark.parametrize("chunked", [False, True])
def test_a_50_mb_body_is_refused_with_413_at_once(http: httpx.Client, chunked: bool) -> None:
    body = _body(50 << 20)
    started = time.monotonic()
    response = http.post("/generate", content=_chunks(body) if chunked else body, headers=JSON)
    elapsed = time.monotonic() - started
    error = assert_openai_error(response, 413)
    assert str(DEFAULT_LIMIT) in error["message"]
    # Tokenizing it took minutes; refusing it is no more than moving the bytes.
    assert elapsed < 10, elapsed
    assert http.post("/generate", json={"text": "Hi", "sampling_params": {"max_new_tokens": 1}}).status_code == 200


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions", "/v1/tokenize", "/v1/detokenize"])
def test_the_limit_covers_every_route(http: httpx.Client, path: str) -> None:
    response = http.post(path, content=b"{" + b" " * (DEFAULT_LIMIT + 10) + b"}", headers=JSON)
    assert_openai_error(response, 413)


def test_a_text_too_long_for_the_context_is_refused_before_tokenizing_it(http: httpx.Client) -> None:
    body = _body(15 << 20)  # under the size limit, a thousand times the context
    started = time.monotonic()
    error = assert_openai_error(http.post("/generate", content=body, headers=JSON), 400, "text")
    elapsed = time.monotonic() - started
    assert "context length" in error["message"]
    assert elapsed < 10, elapsed  # tokenizing 15 MB in full takes about half a minute here


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/generate", {"text": "Hi", "sampling_params": {"max_new_tokens": 10**12}}, "sampling_params.max_new_tokens"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 10**12}, "max_tokens"),
    ],
)
def test_max_new_tokens_past_the_context_is_refused(
    http: httpx.Client, model_info: dict, path: str, body: dict, param: str
) -> None:
    started = time.monotonic()
    error = assert_openai_error(http.post(path, json=body), 400, param)
    assert error["message"].startswith(
        f"Requested token count exceeds the model's maximum context length of {model_info['context_length']} tokens."
    )
    assert time.monotonic() - started < 10  # refused, not generated until the context is full


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"text": "Hi", "sampling_params": "greedy"}, "sampling_params"),
        ({"text": "Hi", "rid": 12}, "rid"),
        ({"text": ["a", "b"], "rid": [1, 2]}, "rid"),
        ({"text": "Hi", "stream": "yes"}, "stream"),
        ({"text": "Hi", "stream": 1}, "stream"),
    ],
)
def test_rid_and_stream_types(http: httpx.Client, body: dict, param: str) -> None:
    assert_openai_error(http.post("/generate", json=body), 400, param)


def _aborted(http: httpx.Client) -> float:
    lines = http.get("/metrics").text.splitlines()
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith("sglang:num_aborted_requests_total"))


def test_disconnect_aborts_are_counted(server: RunningServer, http: httpx.Client) -> None:
    before = _aborted(http)
    body = {"text": "Once", "stream": True, "sampling_params": {"max_new_tokens": 2000, "ignore_eos": True}}
    with server.client() as client, client.stream("POST", "/generate", json=body) as response:
        assert next(sse_events(response.iter_lines()))["meta_info"]["finish_reason"] is None
    wait_until(lambda: _aborted(http) == before + 1, timeout=30)
    samples = http.get("/metrics").text
    assert 'sglang_requests_total{reason="abort"}' in samples
