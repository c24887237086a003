"""What SGLang's routers (smg, sglang-router) read from a worker, against a real server: server
and model info under both names, `/get_load`, `/v1/models`, upstream's metric names, and the
model name `unknown` the routers fill in."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest

from sglang.ci.servers import RunningServer, sse_events, wait_until

PROMPT = "The capital of France is"


@pytest.mark.parametrize("path", ["/get_server_info", "/server_info"])
def test_server_info_resolved(http: httpx.Client, model_info: dict[str, Any], path: str) -> None:
    info = http.get(path).json()
    # The served model's path, not the null the flag defaults to.
    assert info["model_path"] == model_info["model_path"] and info["model_path"]
    assert info["served_model_name"] == info["model_path"]
    assert (info["tp_size"], info["dp_size"]) == (1, 1)
    assert isinstance(info["version"], str) and info["version"]
    assert isinstance(info["max_running_requests"], int) and info["max_running_requests"] > 0
    assert info["max_total_num_tokens"] > 0
    assert "api_key" not in info


@pytest.mark.parametrize("path", ["/get_model_info", "/model_info"])
def test_model_info_fields(http: httpx.Client, path: str) -> None:
    info = http.get(path).json()
    assert info["architectures"] == ["LlamaForCausalLM"]
    assert info["model_type"] == "llama"
    assert info["is_generation"] is True
    assert info["tokenizer_path"] and info["model_path"]


def test_models_card(http: httpx.Client, model_info: dict[str, Any]) -> None:
    card = http.get("/v1/models").json()["data"][0]
    assert card["owned_by"] == "sglang"
    assert card["root"] == model_info["model_path"]
    assert card["max_model_len"] == model_info["context_length"]


def test_model_name_unknown_is_the_served_model(http: httpx.Client) -> None:
    body = {"model": "unknown", "prompt": PROMPT, "max_tokens": 1}
    assert http.post("/v1/completions", json=body).status_code == 200
    messages = [{"role": "user", "content": "Hi"}]
    chat = http.post("/v1/chat/completions", json={"model": "unknown", "messages": messages, "max_tokens": 1})
    assert chat.status_code == 200, chat.text
    assert http.post("/v1/completions", json={**body, "model": "other"}).status_code == 404


def test_get_load_counts_a_running_request(server: RunningServer, http: httpx.Client) -> None:
    idle = http.get("/get_load").json()
    assert isinstance(idle, list) and len(idle) == 1
    assert set(idle[0]) >= {"dp_rank", "num_reqs", "num_waiting_reqs", "num_tokens"}
    body = {"text": PROMPT, "stream": True, "sampling_params": {"max_new_tokens": 2000, "ignore_eos": True}}
    started, done = threading.Event(), threading.Event()

    def stream() -> None:
        with server.client() as client, client.stream("POST", "/generate", json=body) as response:
            for event in sse_events(response.iter_lines()):
                started.set()
                if done.is_set() or event == "[DONE]":
                    break

    thread = threading.Thread(target=stream)
    thread.start()
    try:
        assert started.wait(60)
        busy = wait_until(lambda: next((e for e in http.get("/get_load").json() if e["num_reqs"] >= 1), None))
        assert busy["num_tokens"] > 5  # the prompt and the tokens made so far
    finally:
        done.set()
        thread.join(60)


def _samples(http: httpx.Client) -> dict[str, float]:
    samples = {}
    for line in http.get("/metrics").text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name.split("{")[0]] = samples.get(name.split("{")[0], 0.0) + float(value)
    return samples


def test_upstream_metric_names(http: httpx.Client) -> None:
    http.post("/generate", json={"text": PROMPT, "sampling_params": {"max_new_tokens": 2, "ignore_eos": True}})
    before = _samples(http)
    for name in (
        "sglang:token_usage",
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
        "sglang:num_used_tokens",
        "sglang:cache_hit_rate",
        "sglang:num_requests_total",
        "sglang:num_aborted_requests_total",
        "sglang:prompt_tokens_total",
        "sglang:generation_tokens_total",
        "sglang:time_to_first_token_seconds_bucket",
        "sglang:e2e_request_latency_seconds_count",
    ):
        assert name in before, name
    assert 0 <= before["sglang:token_usage"] <= 1
    http.post("/generate", json={"text": PROMPT, "sampling_params": {"max_new_tokens": 3, "ignore_eos": True}})
    after = _samples(http)
    assert after["sglang:generation_tokens_total"] == before["sglang:generation_tokens_total"] + 3
    assert after["sglang:num_requests_total"] == before["sglang:num_requests_total"] + 1
    # Ours stay beside them.
    assert after["sglang_generation_tokens_total"] == before["sglang_generation_tokens_total"] + 3
