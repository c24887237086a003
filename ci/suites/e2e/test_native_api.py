"""SGLang's native HTTP API against a real server: /generate (single, batch, streaming, a batch's
and n > 1's streams, logprobs, input ids), the info and health endpoints, /flush_cache,
/abort_request and /metrics."""

from __future__ import annotations

import itertools
import re
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from sglang.ci.servers import RunningServer, sse_events, wait_until
from sglang.ci.suites.e2e.openai_errors import assert_openai_error

PROMPT = "The capital of France is"


def generate(http: httpx.Client, **body: Any) -> Any:
    response = http.post("/generate", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def greedy(max_new_tokens: int, **extra: Any) -> dict[str, Any]:
    return {"max_new_tokens": max_new_tokens, "temperature": 0, **extra}


def stream_generate(http: httpx.Client, **body: Any) -> list[Any]:
    """Every SSE payload of a streaming /generate, `[DONE]` included."""
    with http.stream("POST", "/generate", json={**body, "stream": True}) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        return list(sse_events(response.iter_lines()))


@contextmanager
def running_stream(server: RunningServer, rid: str, max_new_tokens: int = 2000) -> Iterator[Iterator[Any]]:
    """A long streaming /generate with request id `rid`, started and past its first token; yields
    the rest of its events. The connection closes (aborting it, if still running) on exit."""
    body = {
        "text": PROMPT,
        "rid": rid,
        "stream": True,
        "sampling_params": {"max_new_tokens": max_new_tokens, "ignore_eos": True},
    }
    with server.client() as client, client.stream("POST", "/generate", json=body) as response:
        assert response.status_code == 200, response.read()
        events = sse_events(response.iter_lines())
        first = next(events)
        assert first["meta_info"]["finish_reason"] is None
        yield events


# -- /generate ---------------------------------------------------------------------------------


@pytest.mark.e2e_core
def test_generate_single(http: httpx.Client, tokenizer: Any) -> None:
    out = generate(http, text=PROMPT, sampling_params=greedy(6, ignore_eos=True))
    meta = out["meta_info"]
    assert isinstance(out["text"], str) and out["text"]
    assert len(out["output_ids"]) == meta["completion_tokens"] == 6
    assert meta["prompt_tokens"] == len(tokenizer.encode(PROMPT))
    assert meta["finish_reason"] == {"type": "length", "length": 6}
    assert out["text"] == tokenizer.decode(out["output_ids"], skip_special_tokens=True)
    assert meta["e2e_latency"] >= meta["ttft"] > 0
    # Greedy is deterministic: the same request gives the same tokens.
    again = generate(http, text=PROMPT, sampling_params=greedy(6, ignore_eos=True))
    assert again["output_ids"] == out["output_ids"]
    assert again["meta_info"]["id"] != meta["id"]


@pytest.mark.e2e_core
def test_generate_batch_with_per_item_sampling_params(http: httpx.Client) -> None:
    prompts = [PROMPT, "One, two, three,", "Water boils at"]
    params = [greedy(1, ignore_eos=True), greedy(3, ignore_eos=True), greedy(2, ignore_eos=True)]
    out = generate(http, text=prompts, sampling_params=params)
    assert isinstance(out, list) and len(out) == 3
    assert [o["meta_info"]["completion_tokens"] for o in out] == [1, 3, 2]
    assert len({o["meta_info"]["id"] for o in out}) == 3
    # In order: each item equals the same prompt run alone.
    alone = generate(http, text=prompts[1], sampling_params=params[1])
    assert out[1]["output_ids"] == alone["output_ids"]


def test_generate_one_sampling_params_for_a_batch(http: httpx.Client) -> None:
    out = generate(http, input_ids=[[1, 2, 3], [4, 5]], sampling_params=greedy(2, ignore_eos=True))
    assert [o["meta_info"]["prompt_tokens"] for o in out] == [3, 2]
    assert [o["meta_info"]["completion_tokens"] for o in out] == [2, 2]


@pytest.mark.e2e_core
def test_generate_stream_is_cumulative_and_ends_with_done(http: httpx.Client) -> None:
    events = stream_generate(http, text=PROMPT, sampling_params=greedy(5, ignore_eos=True))
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert len(chunks) >= 2
    for before, after in itertools.pairwise(chunks):
        assert after["text"].startswith(before["text"])
        assert after["output_ids"][: len(before["output_ids"])] == before["output_ids"]
        assert before["meta_info"]["finish_reason"] is None
    final = chunks[-1]
    assert final["meta_info"]["finish_reason"] == {"type": "length", "length": 5}
    assert len(final["output_ids"]) == 5
    # The stream's final text is what the same greedy request gives without streaming.
    assert final["text"] == generate(http, text=PROMPT, sampling_params=greedy(5, ignore_eos=True))["text"]


def test_generate_stream_of_a_batch_and_of_n_tags_each_sequence(http: httpx.Client) -> None:
    """As upstream: every sequence streams its own cumulative outputs, each with its `index`
    (prompt-major), and each sequence's last equals the same request without streaming."""
    prompts = [PROMPT, "One, two, three,"]
    params = [greedy(3, ignore_eos=True), greedy(4, ignore_eos=True)]
    events = stream_generate(http, text=prompts, sampling_params=params)
    assert events[-1] == "[DONE]"
    by_index: dict[int, list[dict[str, Any]]] = {}
    for event in events[:-1]:
        by_index.setdefault(event["index"], []).append(event)
    assert sorted(by_index) == [0, 1]
    whole = generate(http, text=prompts, sampling_params=params)
    for index, outputs in by_index.items():
        assert len(outputs) == params[index]["max_new_tokens"]  # one event per token
        assert outputs[-1]["output_ids"] == whole[index]["output_ids"]
    samples = stream_generate(http, text=PROMPT, sampling_params={"max_new_tokens": 2, "n": 3, "ignore_eos": True})
    finals = [e for e in samples[:-1] if e["meta_info"]["finish_reason"] is not None]
    assert sorted(e["index"] for e in finals) == [0, 1, 2]


def test_generate_logprobs(http: httpx.Client, tokenizer: Any) -> None:
    prompt_ids = tokenizer.encode(PROMPT)
    out = generate(
        http,
        text=PROMPT,
        sampling_params=greedy(3, ignore_eos=True),
        return_logprob=True,
        logprob_start_len=1,
        top_logprobs_num=4,
    )
    meta = out["meta_info"]
    # Output: one (logprob, token id) per token; greedy picks the top-1 of each step.
    assert [t for _, t in meta["output_token_logprobs"]] == out["output_ids"]
    assert len(meta["output_top_logprobs"]) == 3
    for (logprob, token), top in zip(meta["output_token_logprobs"], meta["output_top_logprobs"]):
        assert logprob <= 0
        assert len(top) == 4
        top_values = [lp for lp, _ in top]
        assert top_values == sorted(top_values, reverse=True)
        assert top[0][1] == token and top[0][0] == pytest.approx(logprob, abs=1e-4)
    # Input: from position 1 on (position 0 has no logprob); the ids are the prompt's.
    assert [t for _, t in meta["input_token_logprobs"]] == prompt_ids[1:]
    assert all(lp is None or lp <= 0 for lp, _ in meta["input_token_logprobs"])


def test_generate_logprobs_with_text(http: httpx.Client, tokenizer: Any) -> None:
    out = generate(
        http,
        text=PROMPT,
        sampling_params=greedy(2, ignore_eos=True),
        return_logprob=True,
        return_text_in_logprobs=True,
    )
    for logprob, token, text in out["meta_info"]["output_token_logprobs"]:
        assert logprob <= 0 and text == tokenizer.decode([token])


def test_generate_max_new_tokens_zero(http: httpx.Client) -> None:
    out = generate(http, text=PROMPT, sampling_params={"max_new_tokens": 0})
    assert out["text"] == "" and out["output_ids"] == []
    assert out["meta_info"]["completion_tokens"] == 0
    assert out["meta_info"]["finish_reason"]["type"] == "length"


def test_generate_from_input_ids_equals_text(http: httpx.Client, tokenizer: Any) -> None:
    ids = tokenizer.encode(PROMPT)
    by_ids = generate(http, input_ids=ids, sampling_params=greedy(4, ignore_eos=True))
    by_text = generate(http, text=PROMPT, sampling_params=greedy(4, ignore_eos=True))
    assert by_ids["meta_info"]["prompt_tokens"] == len(ids)
    assert by_ids["output_ids"] == by_text["output_ids"]


def test_generate_stop_string(http: httpx.Client) -> None:
    free = generate(http, text=PROMPT, sampling_params=greedy(8, ignore_eos=True))
    stop = free["text"].strip().split()[0][:2]
    assert stop, free
    out = generate(http, text=PROMPT, sampling_params=greedy(8, ignore_eos=True, stop=stop))
    assert out["meta_info"]["finish_reason"]["type"] == "stop"
    assert stop not in out["text"]
    assert free["text"].startswith(out["text"])


# -- info and health ---------------------------------------------------------------------------


@pytest.mark.e2e_core
def test_get_model_info(model_info: dict[str, Any]) -> None:
    assert model_info["is_generation"] is True
    assert model_info["architecture"] == "LlamaForCausalLM"
    assert model_info["context_length"] == 8192
    assert model_info["model_path"] and model_info["tokenizer_path"]
    assert "<|im_start|>" in model_info["chat_template"]


def test_get_server_info(server: RunningServer) -> None:
    info = server.server_info()
    assert info["kv_tokens_total"] == 8192
    assert info["max_total_tokens"] == 8192
    for key in ("num_running_requests", "num_waiting_requests", "kv_tokens_in_use", "kv_tokens_cached", "version"):
        assert key in info
    assert 0 <= info["kv_tokens_cached"] <= info["kv_tokens_in_use"] <= info["kv_tokens_total"]
    assert "api_key" not in info


@pytest.mark.e2e_core
def test_health_and_health_generate(http: httpx.Client) -> None:
    assert http.get("/health").status_code == 200
    assert http.get("/health_generate").status_code == 200


# -- flush_cache and abort_request ---------------------------------------------------------------


def test_flush_cache_refused_while_a_request_runs(server: RunningServer, http: httpx.Client) -> None:
    generate(http, text=PROMPT, sampling_params=greedy(1))
    assert server.server_info()["kv_tokens_cached"] > 0
    rid = f"flush-{uuid.uuid4().hex}"
    with running_stream(server, rid):
        error = assert_openai_error(http.post("/flush_cache"), 409)
        assert "not flushed" in error["message"] and len(error["message"]) > len("cache not flushed: ")
        assert http.post("/abort_request", json={"rid": rid}).json() == {"rid": rid, "aborted": True}
    wait_until(lambda: server.server_info()["num_running_requests"] == 0, timeout=30)
    flushed = http.post("/flush_cache")
    assert flushed.status_code == 200, flushed.text
    assert server.server_info()["kv_tokens_cached"] == 0


@pytest.mark.e2e_core
def test_abort_request_ends_a_running_stream(server: RunningServer, http: httpx.Client) -> None:
    rid = f"abort-{uuid.uuid4().hex}"
    with running_stream(server, rid) as events:
        result: dict[str, Any] = {}

        def read_rest() -> None:
            result["events"] = list(events)

        reader = threading.Thread(target=read_rest, daemon=True)
        reader.start()
        reply = http.post("/abort_request", json={"rid": rid})
        assert reply.status_code == 200 and reply.json() == {"rid": rid, "aborted": True}
        reader.join(timeout=60)
        assert not reader.is_alive(), "the aborted stream did not end"
    rest = result["events"]
    assert rest[-1] == "[DONE]"
    final = rest[-2]
    assert final["meta_info"]["finish_reason"]["type"] == "abort"
    assert final["meta_info"]["completion_tokens"] < 2000
    # Unknown ids and malformed bodies.
    assert http.post("/abort_request", json={"rid": rid}).json() == {"rid": rid, "aborted": False}
    assert_openai_error(http.post("/abort_request", json={"id": 1}), 400, "rid")


# -- metrics -----------------------------------------------------------------------------------

METRICS = (
    "sglang_requests_total",
    "sglang_prompt_tokens_total",
    "sglang_generation_tokens_total",
    "sglang_cached_prompt_tokens_total",
    "sglang_time_to_first_token_seconds_bucket",
    "sglang_inter_token_latency_seconds_bucket",
    "sglang_e2e_request_latency_seconds_count",
    "sglang_num_running_requests",
    "sglang_num_queued_requests",
    "sglang_kv_cache_usage",
    "sglang_cache_hit_rate",
)


def scrape(http: httpx.Client) -> dict[str, float]:
    """`/metrics` as {sample name with labels: value}."""
    response = http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples = {}
    for line in response.text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return samples


def metric_sum(samples: dict[str, float], name: str) -> float:
    return sum(v for k, v in samples.items() if re.fullmatch(rf"{name}(\{{.*\}})?", k))


def test_metrics_names_and_counters(http: httpx.Client) -> None:
    generate(http, text=PROMPT, sampling_params=greedy(1))  # at least one finished request
    before = scrape(http)
    for name in METRICS:
        assert any(k == name or k.startswith(name + "{") for k in before), name
    generate(http, text="Count: 1, 2,", sampling_params=greedy(3, ignore_eos=True))
    after = scrape(http)
    assert metric_sum(after, "sglang_requests_total") == metric_sum(before, "sglang_requests_total") + 1
    assert after["sglang_generation_tokens_total"] == before["sglang_generation_tokens_total"] + 3
    assert after["sglang_prompt_tokens_total"] > before["sglang_prompt_tokens_total"]
    count = "sglang_e2e_request_latency_seconds_count"
    assert after[count] == before[count] + 1
    assert 0 <= after["sglang_kv_cache_usage"] <= 1
