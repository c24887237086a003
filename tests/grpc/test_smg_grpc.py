"""smg 1.13 (`smg launch`, from PyPI in its own venv) in gRPC mode in front of two of our
`--smg-grpc-mode` workers: smg tokenizes and applies the chat template itself and sends token
ids. Its chat and completion answers must be token-identical (greedy) to the same requests over
our own HTTP API; a client that goes away frees its request on the worker; a killed worker
leaves rotation while the other keeps answering.

What smg needs from a worker: `GetModelInfo.tokenizer_path`, a tokenizer folder on smg's host
(tokenizer.json, tokenizer_config.json and the chat template, which smg reads itself); the model
id smg registers is `GetModelInfo.model_path`, not `served_model_name`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from sglang.ci.servers import RunningServer, ServerGroup, wait_until

from ..clients import routers
from ..clients.services import start_server
from ..clients.venvs import SMG, ensure_venv
from .workers import GrpcWorker, start_grpc_worker

pytestmark = pytest.mark.slow

TIMEOUT_S = 120.0
PROMPTS = ("The capital of France is", "Write a haiku about rivers.", "List three prime numbers:", "Hello, my name is")


@dataclass
class GrpcFleet:
    a: GrpcWorker
    b: GrpcWorker
    http: RunningServer
    """The same model over our HTTP API: the reference answers."""
    smg: RunningServer
    model: str


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GrpcFleet]:
    venv = ensure_venv(SMG)
    with ServerGroup(tmp_path_factory.mktemp("smg-grpc")) as services:
        a, b = start_grpc_worker(services), start_grpc_worker(services)
        http = start_server(services)
        for server in (a.sidecar, b.sidecar, http):
            server.wait_ready()
        urls = [a.grpc_url, b.grpc_url]
        smg = routers.start_router(services, venv, "smg-grpc", urls, "round_robin")
        routers.wait_for_workers(smg, set(urls), timeout=120)
        model = httpx.get(smg.url + "/v1/models", timeout=30).json()["data"][0]["id"]
        yield GrpcFleet(a, b, http, smg, model)


def _post(server: RunningServer, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = httpx.post(server.url + path, json=body, timeout=TIMEOUT_S)
    assert response.status_code == 200, response.text
    return response.json()


def _answer(body: dict[str, Any]) -> tuple[str, int, int]:
    choice = body["choices"][0]
    text = choice["message"]["content"] if "message" in choice else choice["text"]
    return text, body["usage"]["prompt_tokens"], body["usage"]["completion_tokens"]


def test_chat_and_completions_match_the_http_api(fleet: GrpcFleet) -> None:
    before = [w.sidecar.metric_total("sglang:num_requests_total") for w in (fleet.a, fleet.b)]
    for prompt in PROMPTS:
        chat = {"messages": [{"role": "user", "content": prompt}], "max_tokens": 12, "temperature": 0}
        completion = {"prompt": prompt, "max_tokens": 12, "temperature": 0}
        for path, body in (("/v1/chat/completions", chat), ("/v1/completions", completion)):
            through_smg = _answer(_post(fleet.smg, path, {**body, "model": fleet.model}))
            over_http = _answer(_post(fleet.http, path, body))
            assert through_smg == over_http, (path, prompt)
    after = [w.sidecar.metric_total("sglang:num_requests_total") for w in (fleet.a, fleet.b)]
    assert all(x > y for x, y in zip(after, before, strict=True))  # round robin: both served


def test_client_gone_frees_the_request(fleet: GrpcFleet) -> None:
    body = {"model": fleet.model, "prompt": "Count:", "max_tokens": 2000, "ignore_eos": True, "stream": True}
    channels = [w.channel() for w in (fleet.a, fleet.b)]
    stubs = [w.stub(c) for w, c in zip((fleet.a, fleet.b), channels, strict=True)]

    def running() -> int:
        return sum(w.running(s) for w, s in zip((fleet.a, fleet.b), stubs, strict=True))

    with httpx.stream("POST", fleet.smg.url + "/v1/completions", json=body, timeout=TIMEOUT_S) as response:
        lines = response.iter_lines()
        next(line for line in lines if line.startswith("data:"))
        assert running() == 1
    wait_until(lambda: running() == 0, timeout=30, what="the abandoned request freed on its worker")
    for channel in channels:
        channel.close()


def test_killed_worker_leaves_rotation(fleet: GrpcFleet) -> None:
    fleet.b.sidecar.kill()
    wait_until(
        lambda: fleet.b.grpc_url not in routers.healthy_worker_urls(fleet.smg), timeout=60, what="B out of rotation"
    )
    for prompt in PROMPTS:
        body = {"model": fleet.model, "prompt": prompt, "max_tokens": 4, "temperature": 0}
        answer = _post(fleet.smg, "/v1/completions", body)  # 200, from A
        assert answer["choices"][0]["finish_reason"] in ("stop", "length") and answer["usage"]["completion_tokens"] > 0
