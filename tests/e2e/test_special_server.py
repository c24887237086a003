"""Behaviour that needs special flags, on one dedicated server started for this module:
`--api-key` (401 before the body is read), `--max-queued-requests 2 --max-running-requests 1`
(overload answers 503 with Retry-After), and SIGTERM (the in-flight request completes, new ones
are refused, exit code 0). The SIGTERM test runs last: it ends the server."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest

from sglang.ci.servers import REQUEST_TIMEOUT_S, RunningServer, sse_events
from sglang.ci.suites.e2e.openai_errors import assert_openai_error

API_KEY = "sk-e2e-secret"
DRAIN_EXIT_WITHIN_S = 60.0


@pytest.fixture(scope="module")
def special(server_factory: Callable[..., RunningServer]) -> RunningServer:
    return server_factory(
        "--max-total-tokens", "4096", "--max-queued-requests", "2", "--max-running-requests", "1", api_key=API_KEY
    )


@pytest.fixture(scope="module")
def anonymous(special: RunningServer) -> Iterator[httpx.Client]:
    """A client that sends no API key."""
    with httpx.Client(base_url=special.url, timeout=REQUEST_TIMEOUT_S) as client:
        yield client


ONE_TOKEN = {"text": "Hi", "sampling_params": {"max_new_tokens": 1}}


# -- API key -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/generate"),
        ("POST", "/v1/completions"),
        ("POST", "/v1/chat/completions"),
        ("GET", "/v1/models"),
        ("GET", "/get_server_info"),
        ("GET", "/get_model_info"),
        ("POST", "/flush_cache"),
        ("POST", "/abort_request"),
        ("GET", "/health_generate"),  # it runs a generation: behind the key, unlike /health
    ],
)
def test_missing_key_is_401(anonymous: httpx.Client, method: str, path: str) -> None:
    assert_openai_error(anonymous.request(method, path, json=ONE_TOKEN), 401)


@pytest.mark.parametrize(
    "authorization", ["Bearer wrong-key", f"Basic {API_KEY}", f"Bearer {API_KEY}x", "Bearer", API_KEY, "Bearer é"]
)
def test_wrong_key_is_401(anonymous: httpx.Client, authorization: str) -> None:
    response = anonymous.post("/generate", json=ONE_TOKEN, headers={"Authorization": authorization.encode("latin-1")})
    error = assert_openai_error(response, 401)
    assert error["type"] == "authentication_error"


def test_key_is_checked_before_the_body_is_parsed(anonymous: httpx.Client) -> None:
    for path in ("/generate", "/v1/chat/completions", "/v1/completions"):
        response = anonymous.post(path, content=b"{definitely not json", headers={"content-type": "application/json"})
        assert_openai_error(response, 401)
        # With the key, the same body is a 400.
        response = anonymous.post(
            path,
            content=b"{definitely not json",
            headers={"content-type": "application/json", "Authorization": f"Bearer {API_KEY}"},
        )
        assert_openai_error(response, 400)


def test_right_key_and_open_probes(special: RunningServer, anonymous: httpx.Client) -> None:
    with special.client() as client:
        out = client.post("/generate", json=ONE_TOKEN)
        assert out.status_code == 200 and out.json()["meta_info"]["completion_tokens"] == 1
        assert client.get("/health_generate").status_code == 200
    # Probes and scrapes need no key, as load balancers and Prometheus expect.
    for probe in ("/health", "/ping", "/ready", "/metrics"):
        assert anonymous.get(probe).status_code == 200, probe
    # SageMaker's inference route is the chat route, behind the key like it.
    chat = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}
    assert anonymous.post("/invocations", json=chat).status_code == 401
    with special.client() as client:
        answer = client.post("/invocations", json=chat).json()
    assert answer["object"] == "chat.completion" and answer["usage"]["completion_tokens"] == 1


def test_openai_client_with_and_without_the_key(special: RunningServer) -> None:
    url = f"{special.url}/v1"
    bad = openai.OpenAI(base_url=url, api_key="not-the-key", max_retries=0, timeout=REQUEST_TIMEOUT_S)
    with bad, pytest.raises(openai.AuthenticationError):
        bad.models.list()
    with openai.OpenAI(base_url=url, api_key=API_KEY, max_retries=0, timeout=REQUEST_TIMEOUT_S) as good:
        model = good.models.list().data[0].id
        out = good.completions.create(model=model, prompt="Hi", max_tokens=1)
        assert out.usage.completion_tokens == 1


# -- overload ----------------------------------------------------------------------------------


def concurrently(calls: list[Callable[[], httpx.Response]]) -> list[httpx.Response]:
    """Runs `calls` at once, each on its own thread released by one barrier."""
    barrier = threading.Barrier(len(calls))
    results: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = calls[i]()
        except Exception as e:
            results[i] = e

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(REQUEST_TIMEOUT_S)
    assert all(isinstance(r, httpx.Response) for r in results), results
    return results


def test_overload_gets_503_with_retry_after(special: RunningServer) -> None:
    native = {"text": "Count to ten:", "sampling_params": {"max_new_tokens": 6, "ignore_eos": True}}
    chat = {"messages": [{"role": "user", "content": "Count to ten."}], "max_tokens": 6, "ignore_eos": True}

    def request(path: str, body: dict[str, Any]) -> Callable[[], httpx.Response]:
        def call() -> httpx.Response:
            with special.client() as client:
                return client.post(path, json=body)

        return call

    calls = [request("/generate", native), request("/v1/chat/completions", chat)] * 4
    responses = concurrently(calls)
    statuses = [r.status_code for r in responses]
    assert set(statuses) <= {200, 503}, [r.text for r in responses]
    assert statuses.count(503) >= 1, statuses
    assert statuses.count(200) >= 2, statuses
    for response in responses:
        if response.status_code == 503:
            assert int(response.headers["retry-after"]) > 0
            error = assert_openai_error(response, 503)
            assert error["type"] == "server_overloaded"
        else:
            body = response.json()
            tokens = (
                body["meta_info"]["completion_tokens"] if "meta_info" in body else body["usage"]["completion_tokens"]
            )
            assert tokens == 6
    # Afterwards the server serves as usual.
    with special.client() as client:
        out = client.post("/generate", json=ONE_TOKEN)
    assert out.status_code == 200, out.text
    assert special.server_info()["num_waiting_requests"] == 0


# -- SIGTERM -----------------------------------------------------------------------------------


def test_sigterm_drains_then_exits_zero(special: RunningServer) -> None:
    assert special.process is not None
    tokens = 24
    body = {
        "text": "Once upon a time",
        "stream": True,
        "sampling_params": {"max_new_tokens": tokens, "ignore_eos": True},
    }
    with special.client() as client, client.stream("POST", "/generate", json=body) as response:
        assert response.status_code == 200
        events = sse_events(response.iter_lines())
        first = next(events)
        assert first["meta_info"]["finish_reason"] is None
        special.process.terminate()  # SIGTERM
        time.sleep(0.5)
        # New work is refused while the running request drains.
        try:
            with special.client(timeout=10) as other:
                refused = other.post("/generate", json=ONE_TOKEN)
            assert refused.status_code == 503, refused.text
            assert_openai_error(refused, 503)
        except httpx.ConnectError:
            pass  # the listener is already closed: refused too
        rest = list(events)
    # The in-flight request completed normally.
    assert rest[-1] == "[DONE]"
    final = rest[-2]
    assert final["meta_info"]["finish_reason"] == {"type": "length", "length": tokens}
    assert len(final["output_ids"]) == tokens
    # And the process exits, cleanly, soon after.
    code = special.process.wait(DRAIN_EXIT_WITHIN_S)
    assert code == 0, special.log_tail()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{special.url}/health", timeout=5)
