"""A fleet on loopback: our `sglang serve` processes behind SGLang's own routers, unchanged.

Three servers of ours start together (A and B form the fleet; C waits to be added at run time)
and each router runs from its own venv:

- sglang-router 0.3.2 (smg's predecessor; marked slow, as smg below covers the same routing), round
  robin over A and B: native and OpenAI requests, streaming included, are answered, and both
  workers serve some;
- smg 1.13.0, cache aware over A and B: the same requests (and a Responses API one) are answered; requests that share a
  long prefix all land on one worker (each worker's finished-request counter says which) and
  that worker serves the prefix from its cache; B killed while requests are in flight leaves
  rotation, only requests that were in flight on B may fail, and every request sent after the
  kill succeeds; C added through `POST /workers` receives traffic.

Which worker served a request is read from the workers, never from the router: the difference
of each worker's upstream finished-request counter (`sglang:num_requests_total`) around it.

Cost on a shared 2-core machine: three servers loading side by side (about half a minute), then
about 50 short requests (at most 96 new tokens each): a minute or two in all.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from sglang.ci.servers import RunningServer, ServerGroup, sse_events, wait_until

from . import routers
from .services import finished_requests, start_server
from .venvs import Venv

REQUEST_TIMEOUT_S = 60.0
MAX_TOKENS = 8


@dataclass
class Fleet:
    a: RunningServer
    b: RunningServer
    c: RunningServer
    """Not behind any router until the test that adds it."""

    def counts(self, *servers: RunningServer) -> list[float]:
        return [finished_requests(s) for s in servers]


@pytest.fixture(scope="module")
def fleet(services: ServerGroup) -> Fleet:
    servers = [start_server(services) for _ in range(3)]  # they load side by side
    for server in servers:
        server.wait_ready()
    return Fleet(*servers)


@pytest.fixture(scope="module")
def smg(services: ServerGroup, smg_venv: Venv, fleet: Fleet) -> RunningServer:
    router = routers.start_router(services, smg_venv, "smg", [fleet.a.url, fleet.b.url], "cache_aware")
    router.wait_ready(timeout=60)
    routers.wait_for_workers(router, {fleet.a.url, fleet.b.url})
    return router


def model_id(router: RunningServer) -> str:
    """The model name the router lists (our served model name, which OpenAI bodies must carry)."""
    response = router.get("/v1/models")
    response.raise_for_status()
    data = response.json()["data"]
    assert data, response.text
    return data[0]["id"]


# ---- the request kinds every router must pass -----------------------------------------------


def generate(client: httpx.Client, text: str, max_new_tokens: int = MAX_TOKENS, **extra: Any) -> dict[str, Any]:
    response = client.post(
        "/generate",
        json={"text": text, "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0, **extra}},
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert isinstance(body["text"], str) and body["meta_info"]["completion_tokens"] >= 1, body
    return body


def generate_stream(client: httpx.Client, text: str) -> None:
    body = {"text": text, "stream": True, "sampling_params": {"max_new_tokens": MAX_TOKENS, "temperature": 0}}
    with client.stream("POST", "/generate", json=body) as response:
        assert response.status_code == 200, response.read()
        events = [e for e in sse_events(response.iter_lines()) if e != "[DONE]"]
    assert len(events) >= 2, events  # incremental, not one final piece
    assert events[-1]["meta_info"]["finish_reason"] is not None, events[-1]
    assert events[-1]["text"].startswith(events[0]["text"])


def completion(client: httpx.Client, model: str, prompt: str, stream: bool = False) -> None:
    body = {"model": model, "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0, "stream": stream}
    if not stream:
        response = client.post("/v1/completions", json=body)
        assert response.status_code == 200, response.text
        choice = response.json()["choices"][0]
        assert isinstance(choice["text"], str) and choice["finish_reason"], choice
        return
    with client.stream("POST", "/v1/completions", json=body) as response:
        assert response.status_code == 200, response.read()
        events = list(sse_events(response.iter_lines()))
    assert events[-1] == "[DONE]", events
    assert any(e["choices"] and e["choices"][0].get("finish_reason") for e in events[:-1]), events


def chat(client: httpx.Client, model: str, content: str, stream: bool = False) -> None:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "stream": stream,
    }
    if not stream:
        response = client.post("/v1/chat/completions", json=body)
        assert response.status_code == 200, response.text
        message = response.json()["choices"][0]["message"]
        assert message["role"] == "assistant" and message["content"], message
        return
    with client.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200, response.read()
        events = list(sse_events(response.iter_lines()))
    assert events[-1] == "[DONE]", events
    deltas = [e["choices"][0]["delta"].get("content") or "" for e in events[:-1] if e["choices"]]
    assert "".join(deltas), events


def responses(client: httpx.Client, model: str, content: str) -> None:
    body = {"model": model, "input": content, "max_output_tokens": MAX_TOKENS, "temperature": 0}
    response = client.post("/v1/responses", json=body)
    assert response.status_code == 200, response.text
    out = response.json()
    assert out["object"] == "response" and out["output"][0]["content"][0]["text"], out


def every_kind(router: RunningServer, responses_api: bool = False) -> int:
    """One request of each kind through `router` (OpenAI's Responses API too where the router
    forwards it: smg does); returns how many were sent."""
    model = model_id(router)
    sent: list[Callable[[httpx.Client], None]] = [
        lambda c: generate(c, "The capital of France is"),
        lambda c: generate_stream(c, "The capital of Italy is"),
        lambda c: completion(c, model, "The capital of Spain is"),
        lambda c: completion(c, model, "The capital of Japan is", stream=True),
        lambda c: chat(c, model, "What is the capital of Germany?"),
        lambda c: chat(c, model, "What is the capital of Egypt?", stream=True),
    ]
    if responses_api:
        sent.append(lambda c: responses(c, model, "What is the capital of Peru?"))
    with httpx.Client(base_url=router.url, timeout=REQUEST_TIMEOUT_S) as client:
        for send in sent:
            send(client)
    return len(sent)


# ---- sglang-router: the same basic routing ----------------------------------------------------


@pytest.mark.slow
def test_sglang_router_routes_every_kind(
    services: ServerGroup, router_venv: Venv, fleet: Fleet, figures: dict[str, str]
) -> None:
    router = routers.start_router(services, router_venv, "sglang-router", [fleet.a.url, fleet.b.url], "round_robin")
    try:
        router.wait_ready(timeout=60)
        before = fleet.counts(fleet.a, fleet.b)
        sent = every_kind(router)
        split = [after - b for after, b in zip(fleet.counts(fleet.a, fleet.b), before, strict=True)]
        figures["sglang-router round robin"] = f"{sent} requests, split A/B {split[0]:.0f}/{split[1]:.0f}"
        assert sum(split) == sent  # each request reached exactly one worker, once
        assert min(split) >= 1, split  # round robin used both
    finally:
        router.stop()


# ---- smg ------------------------------------------------------------------------------------


def test_smg_routes_every_kind(smg: RunningServer, fleet: Fleet, figures: dict[str, str]) -> None:
    assert {w["url"] for w in routers.workers(smg)} == {fleet.a.url, fleet.b.url}
    before = fleet.counts(fleet.a, fleet.b)
    sent = every_kind(smg, responses_api=True)
    split = [after - b for after, b in zip(fleet.counts(fleet.a, fleet.b), before, strict=True)]
    figures["smg every kind"] = f"{sent} requests, split A/B {split[0]:.0f}/{split[1]:.0f}"
    assert sum(split) == sent


LONG_PREFIXES = [
    "You are a meticulous travel guide. Answer in one short sentence. " * 12,
    "Below is a list of facts about rivers, mountains and lakes of the world. " * 12,
]


def test_smg_cache_aware_keeps_a_prefix_on_one_worker(
    smg: RunningServer, fleet: Fleet, figures: dict[str, str]
) -> None:
    """Each group of requests shares a long prefix (a few hundred tokens) and differs only in a
    short question: the cache-aware policy sends a whole group to one worker, which then serves
    the prefix from its radix cache."""
    questions = ["Where is Paris?", "Where is Rome?", "Where is Lima?", "Where is Oslo?", "Where is Cairo?"]
    splits = []
    with httpx.Client(base_url=smg.url, timeout=REQUEST_TIMEOUT_S) as client:
        for prefix in LONG_PREFIXES:
            before = fleet.counts(fleet.a, fleet.b)
            cached_before = [s.metric_total("sglang:cached_tokens_total") for s in (fleet.a, fleet.b)]
            for question in questions:  # one at a time: load never outweighs the prefix match
                generate(client, prefix + question)
            split = [after - b for after, b in zip(fleet.counts(fleet.a, fleet.b), before, strict=True)]
            splits.append(split)
            assert sorted(split) == [0, len(questions)], f"a shared prefix was split over workers: A/B {split}"
            chosen = (fleet.a, fleet.b)[split.index(len(questions))]
            cached = chosen.metric_total("sglang:cached_tokens_total") - cached_before[split.index(len(questions))]
            # Every request after the first reuses most of the prefix from that worker's cache.
            assert cached >= (len(questions) - 1) * 100, cached
    figures["smg cache aware"] = "; ".join(
        f"prefix {i + 1}: {len(questions)} requests, split A/B {s[0]:.0f}/{s[1]:.0f}" for i, s in enumerate(splits)
    )


class Outcomes:
    """Results of requests sent from threads: (index, status or exception text)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.items: list[tuple[int, str]] = []

    def add(self, index: int, outcome: str) -> None:
        with self.lock:
            self.items.append((index, outcome))

    def failures(self) -> list[tuple[int, str]]:
        return [(i, o) for i, o in self.items if o != "ok"]


BURST_TOKENS = 96
"""Long enough that the burst is still running on both workers when it is looked for."""


def _send_generate(url: str, index: int, outcomes: Outcomes) -> None:
    # The burst alternates the two long prefixes, which the cache-aware policy usually keeps on
    # different workers, so that both workers usually hold part of the burst.
    prefix = LONG_PREFIXES[index % len(LONG_PREFIXES)]
    body = {
        "text": f"{prefix}Now write a long story about a lighthouse keeper named Sam {index}.",
        "sampling_params": {"max_new_tokens": BURST_TOKENS, "temperature": 0, "ignore_eos": True},
    }
    try:
        response = httpx.post(url + "/generate", json=body, timeout=REQUEST_TIMEOUT_S)
        ok = response.status_code == 200 and response.json()["meta_info"]["completion_tokens"] == BURST_TOKENS
        outcomes.add(index, "ok" if ok else f"{response.status_code} {response.text[:300]}")
    except (httpx.HTTPError, json.JSONDecodeError, KeyError) as exc:
        outcomes.add(index, f"{type(exc).__name__}: {exc}")


def _in_flight(server: RunningServer) -> float:
    """Requests the server holds (running and queued), from its upstream gauges."""
    try:
        return server.metric_total("sglang:num_running_reqs") + server.metric_total("sglang:num_queue_reqs")
    except httpx.HTTPError:
        return 0.0


def test_smg_worker_killed_mid_run(smg: RunningServer, fleet: Fleet, figures: dict[str, str]) -> None:
    """B is killed (SIGKILL, no drain) while a burst of requests runs: at most the requests B
    held fail, smg takes B out of rotation, and every request after the kill succeeds."""
    burst = 8
    outcomes = Outcomes()
    threads = [threading.Thread(target=_send_generate, args=(smg.url, i, outcomes)) for i in range(burst)]
    for thread in threads:
        thread.start()
    try:
        # Kill B only once every request of the burst is running or queued on a worker: then what
        # B holds is exactly what may fail, and the kill lands mid-run. Where the burst lands is
        # smg's choice (the cache-aware policy has put both prefixes on one worker in some runs),
        # so any split is accepted, and the figures say which one this run saw.
        seen: list[tuple[float, float]] = []

        def burst_placed() -> tuple[float, float] | None:
            held = (_in_flight(fleet.a), _in_flight(fleet.b))
            seen.append(held)
            return held if sum(held) == burst else None

        try:
            held = wait_until(burst_placed, timeout=90, interval=0.05, what="the whole burst held by the workers")
        except AssertionError as exc:
            done = sorted(outcomes.items)
            raise AssertionError(f"{exc}; in flight on A/B, last seen: {seen[-5:]}; outcomes so far: {done}") from None
        fleet.b.kill()
        killed_at = time.monotonic()
    finally:
        for thread in threads:
            thread.join(REQUEST_TIMEOUT_S + 10)
    failed = outcomes.failures()
    assert len(outcomes.items) == burst
    assert len(failed) <= held[1], f"more failures than the {held[1]:.0f} requests B held: {failed}"

    # Out of rotation: smg's health check marks B unhealthy (or drops it) within a few intervals.
    wait_until(lambda: fleet.b.url not in routers.healthy_worker_urls(smg), timeout=30, what="B out of rotation")
    out_after = time.monotonic() - killed_at

    after = 6
    a_before = finished_requests(fleet.a)
    with httpx.Client(base_url=smg.url, timeout=REQUEST_TIMEOUT_S) as client:
        for i in range(after):
            generate(client, f"After the kill, question {i}: name a colour.")
    assert finished_requests(fleet.a) - a_before == after  # all on the survivor
    figures["smg kill"] = (
        f"burst of {burst} x {BURST_TOKENS} tokens, in flight at the kill A/B {held[0]:.0f}/{held[1]:.0f}; "
        f"{burst - len(failed)} succeeded, {len(failed)} failed {[o[:80] for _, o in failed]}; "
        f"B out of rotation {out_after:.1f} s after the kill; {after}/{after} later requests succeeded on A"
    )


def test_smg_worker_added_at_run_time(smg: RunningServer, fleet: Fleet, figures: dict[str, str]) -> None:
    response = httpx.post(smg.url + "/workers", json={"url": fleet.c.url}, timeout=30)
    assert response.status_code in (200, 201, 202), response.text
    wait_until(lambda: fleet.c.url in routers.healthy_worker_urls(smg), timeout=60, what="C healthy in smg")
    c_before = finished_requests(fleet.c)
    sent = 0
    with httpx.Client(base_url=smg.url, timeout=REQUEST_TIMEOUT_S) as client:
        # Fresh prompts match no worker's prefix tree, so the policy weighs load and tree size,
        # and the new, empty worker is a candidate from its first request on.
        for i in range(8):
            generate(client, f"Fresh question {i} after adding a worker: what is {i} plus {i}?")
            sent += 1
            if finished_requests(fleet.c) > c_before:
                break
    received = finished_requests(fleet.c) - c_before
    figures["smg add worker"] = f"C received {received:.0f} of the first {sent} requests after it was added"
    assert received >= 1
