"""Upstream SGLang's request surface against a real server: each field implemented here has
its effect, each whose feature is missing is accepted at its default and refused otherwise with
a 400 naming it. (What SGLang's routers add to every body is in the default-value case.)"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import httpx
import pytest

from sglang.ci.servers import GenerateStream, RunningServer, sse_events
from sglang.ci.suites.e2e.openai_errors import assert_openai_error
from sglang.runtime.requests import upstream_fields

PROMPT = "Count: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13,"
MESSAGES = [{"role": "user", "content": "Count from 1 to 20."}]


def generate(http: httpx.Client, **body: Any) -> dict[str, Any]:
    response = http.post("/generate", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def greedy(tokens: int, **extra: Any) -> dict[str, Any]:
    return {"max_new_tokens": tokens, "temperature": 0, **extra}


def test_stop_regex_stops_and_cuts(http: httpx.Client) -> None:
    free = generate(http, text=PROMPT, sampling_params=greedy(12, ignore_eos=True))["text"]
    assert "16" in free, free  # the model counts on, so the pattern below matches mid-output
    out = generate(http, text=PROMPT, sampling_params=greedy(12, ignore_eos=True, stop_regex=r"1[56]"))
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": r"1[56]"}
    assert out["text"] == free[: free.index("15")]
    kept = generate(http, text=PROMPT, sampling_params=greedy(12, stop_regex=[r"x{3}", r"1[56]"], no_stop_trim=True))
    assert kept["text"].endswith("15") and kept["text"].startswith(free[: free.index("15")])


def test_stop_regex_streaming_never_sends_the_match(http: httpx.Client) -> None:
    body = {"text": PROMPT, "stream": True, "sampling_params": greedy(12, ignore_eos=True, stop_regex=r"1[56]")}
    with http.stream("POST", "/generate", json=body) as response:
        texts = [e["text"] for e in sse_events(response.iter_lines()) if e != "[DONE]"]
    assert all(later.startswith(earlier) for earlier, later in itertools.pairwise(texts)), texts
    assert "15" not in texts[-1] and texts[-1].rstrip().endswith("14,"), texts


def test_bad_stop_regex_is_400(http: httpx.Client) -> None:
    for bad in ("(unclosed", 5, ["a"] * 40, "x" * 300):
        body = {"text": "Hi", "sampling_params": {"stop_regex": bad}}
        assert_openai_error(http.post("/generate", json=body), 400, "stop_regex")


def test_stream_interval_and_logprobs_length(http: httpx.Client) -> None:
    body = {
        "text": PROMPT,
        "stream": True,
        "return_logprob": True,
        "sampling_params": greedy(9, ignore_eos=True, stream_interval=3),
    }
    with http.stream("POST", "/generate", json=body) as response:
        events = [e for e in sse_events(response.iter_lines()) if e != "[DONE]"]
    assert [len(e["output_ids"]) for e in events] == [3, 6, 9]
    assert [e["meta_info"]["output_token_logprobs_length"] for e in events] == [3, 6, 9]
    assert_openai_error(
        http.post("/generate", json={"text": "Hi", "sampling_params": {"stream_interval": 0}}), 400, "stream_interval"
    )


def test_sampling_seed_is_seed(http: httpx.Client) -> None:
    sampled = {"max_new_tokens": 8, "temperature": 1.0, "ignore_eos": True}
    a = generate(http, text="Once", sampling_params={**sampled, "sampling_seed": 11})
    b = generate(http, text="Once", sampling_params={**sampled, "seed": 11})
    assert a["output_ids"] == b["output_ids"]
    conflict = {"text": "Once", "sampling_params": {"seed": 1, "sampling_seed": 2}}
    assert_openai_error(http.post("/generate", json=conflict), 400, "sampling_seed")


def test_custom_params_carried_and_typed(http: httpx.Client) -> None:
    plain = generate(http, text=PROMPT, sampling_params=greedy(4))
    carried = generate(http, text=PROMPT, sampling_params=greedy(4, custom_params={"k": [1, "x"], "b": None}))
    assert carried["output_ids"] == plain["output_ids"]  # no custom logit processor: no effect
    bad = {"text": "Hi", "sampling_params": {"custom_params": [1]}}
    assert_openai_error(http.post("/generate", json=bad), 400, "custom_params")


def test_null_means_the_default(http: httpx.Client) -> None:
    nulls = {"temperature": None, "top_p": None, "top_k": None, "n": None, "ignore_eos": None, "stop_regex": None}
    out = generate(http, text=PROMPT, sampling_params={"max_new_tokens": 4, **nulls})
    assert 1 <= out["meta_info"]["completion_tokens"] <= 4


def test_return_entropy(http: httpx.Client) -> None:
    out = generate(http, text=PROMPT, return_entropy=True, sampling_params=greedy(4, ignore_eos=True))
    entropy = out["meta_info"]["output_token_entropy"]
    assert len(entropy) == 4 and all(math.isfinite(h) and h >= 0 for h in entropy)
    # A regex that leaves one possible token makes the distribution a point: entropy 0.
    forced = generate(http, text="Say yes:", return_entropy=True, sampling_params=greedy(8, regex="yes"))
    assert forced["meta_info"]["output_token_entropy"][-1] < 1e-3


def test_return_prompt_token_ids_and_log_metrics(http: httpx.Client) -> None:
    out = generate(http, input_ids=[1, 2, 3], return_prompt_token_ids=True, sampling_params=greedy(1))
    assert out["meta_info"]["prompt_token_ids"] == [1, 2, 3]

    def finished() -> float:
        lines = http.get("/metrics").text.splitlines()
        return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith("sglang:num_requests_total"))

    before = finished()
    generate(http, text="Hi", log_metrics=False, sampling_params=greedy(1))
    assert finished() == before
    generate(http, text="Hi", sampling_params=greedy(1))
    assert finished() == before + 1


ROUTER_FIELDS = {
    "model": "unknown",
    "log_metrics": True,
    "background": False,
    "no_logs": False,
    "return_bytes": False,
    "return_entropy": False,
    "return_hidden_states": False,
    "bootstrap_host": None,
    "bootstrap_port": None,
    "bootstrap_room": None,
    "data_parallel_rank": None,
    "routed_dp_rank": 0,
    "session_id": "s1",
    "routing_key": "k",
    "conversation_id": "c",
}


def test_router_fields_on_generate(http: httpx.Client) -> None:
    out = generate(http, text="Hi", sampling_params=greedy(2), **ROUTER_FIELDS)
    assert out["meta_info"]["completion_tokens"] >= 1
    assert_openai_error(http.post("/generate", json={"text": "Hi", "model": "gpt-9"}), 404, "model")


@pytest.mark.parametrize("path", ["/generate", "/v1/chat/completions"])
def test_bootstrap_fields_need_disaggregation_mode(http: httpx.Client, path: str) -> None:
    """A unified server (`--disaggregation-mode null`) refuses a request meant for a PD pair."""
    pd = {"bootstrap_host": "127.0.0.1", "bootstrap_port": 8998, "bootstrap_room": 7}
    base = {"text": "Hi", "sampling_params": greedy(1)} if path == "/generate" else {"messages": MESSAGES}
    error = assert_openai_error(http.post(path, json={**base, **pd}), 400, "bootstrap_room")
    assert "--disaggregation-mode" in error["message"]


@pytest.mark.parametrize("name", sorted(upstream_fields.GENERATE))
def test_generate_missing_feature_default_accepted_else_named(http: httpx.Client, name: str) -> None:
    missing = upstream_fields.GENERATE[name]
    ok = http.post("/generate", json={"text": "Hi", "sampling_params": greedy(1), name: missing.default})
    assert ok.status_code == 200, ok.text
    refused = http.post("/generate", json={"text": "Hi", "sampling_params": greedy(1), name: "on"})
    error = assert_openai_error(refused, 400, name)
    assert missing.feature in error["message"]


@pytest.mark.parametrize("field", ["beam_width", "structural_tag", "watermark"])
def test_sampling_missing_features(http: httpx.Client, field: str) -> None:
    value = {"beam_width": 4, "structural_tag": '{"type": "structural_tag"}', "watermark": {"k": 1}}[field]
    body = {"text": "Hi", "sampling_params": {field: value}}
    assert "not supported" in assert_openai_error(http.post("/generate", json=body), 400, field)["message"]
    assert http.post("/generate", json={"text": "Hi", "sampling_params": greedy(1, beam_width=1)}).status_code == 200


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
@pytest.mark.parametrize("name", sorted(upstream_fields.OPENAI))
def test_openai_missing_feature_default_accepted_else_named(http: httpx.Client, path: str, name: str) -> None:
    base = {"prompt": "Hi"} if path == "/v1/completions" else {"messages": MESSAGES}
    missing = upstream_fields.OPENAI[name]
    ok = http.post(path, json={**base, "max_tokens": 1, name: missing.default})
    assert ok.status_code == 200, ok.text
    error = assert_openai_error(http.post(path, json={**base, "max_tokens": 1, name: "on"}), 400, name)
    assert missing.feature in error["message"]


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_openai_sampling_extras(http: httpx.Client, path: str) -> None:
    base = {"prompt": PROMPT} if path == "/v1/completions" else {"messages": MESSAGES}
    body = {**base, "max_tokens": 12, "temperature": 0, "ignore_eos": True, "rid": "openai-rid", "priority": 1}
    free = http.post(path, json=body).json()["choices"][0]
    text = free.get("text") or free["message"]["content"]
    digit = next(c for c in text if c.isdigit())
    stopped = http.post(path, json={**body, "stop_regex": digit, "sampling_seed": 3, "custom_params": {}}).json()
    choice = stopped["choices"][0]
    assert choice["finish_reason"] == "stop"
    assert (choice.get("text") or choice["message"]["content"]) == text[: text.index(digit)]
    bad = http.post(path, json={**base, "stop_regex": "(x"})
    assert_openai_error(bad, 400, "stop_regex")
    assert_openai_error(http.post(path, json={**base, "stream": "yes"}), 400, "stream")


def test_profile_routes(http: httpx.Client, tmp_path: Path) -> None:
    """`/start_profile` with the body upstream's `python -m sglang.profiler` posts (step counts as
    strings), a trace after its steps, and refusals as 400s with the reason."""
    body = {"output_dir": str(tmp_path), "num_steps": "2", "activities": ["CPU", "GPU"], "merge_profiles": False}
    started = http.post("/start_profile", json={**body, "profile_by_stage": False, "profile_prefix": "e2e"})
    assert started.status_code == 200 and started.text == "Start profiling.\n"
    again = http.post("/start_profile", json=body)
    assert again.status_code == 400 and "already in progress" in again.json()["error"]["message"]
    generate(http, text=PROMPT, sampling_params=greedy(4))  # four steps: the profile ends after two
    (trace,) = tmp_path.iterdir()
    assert trace.name.startswith("e2e-") and trace.name.endswith("-TP-0.trace.json.gz")
    stopped = http.post("/stop_profile")
    assert stopped.status_code == 400 and "not in progress" in stopped.json()["error"]["message"]
    for bad in ({"num_steps": "many"}, {"activities": ["RPD"]}, {"profile_by_stage": True}, [1]):
        refused = http.post("/start_profile", json=bad)
        assert refused.status_code == 400, (bad, refused.text)
    manual = tmp_path / "manual"
    assert http.post("/start_profile", json={"output_dir": str(manual)}).status_code == 200  # until stopped
    assert http.get("/stop_profile").status_code == 200
    assert [p.name.endswith("-TP-0.trace.json.gz") for p in manual.iterdir()] == [True]


def test_pause_and_continue_routes(http: httpx.Client) -> None:
    """`/pause_generation` holds new requests until `/continue_generation`; a bad mode is a 400.
    Meanwhile the readiness probe fails and SageMaker's `/ping` still passes, as upstream's."""
    assert http.post("/pause_generation", json={"mode": "sometimes"}).status_code == 400
    assert http.get("/ready").status_code == 200
    body = {"text": PROMPT, "sampling_params": greedy(2)}
    try:
        paused = http.post("/pause_generation", json={"mode": "in_place"})
        assert paused.json() == {"message": "Generation paused successfully.", "status": "ok"}
        not_ready = http.get("/ready")
        assert not_ready.status_code == 503 and "paused" in not_ready.json()["error"]["message"]
        assert http.get("/ping").status_code == 200
        with pytest.raises(httpx.ReadTimeout):  # waits for the continue (closing it aborts it)
            http.post("/generate", json=body, timeout=1.5)
    finally:
        continued = http.post("/continue_generation", json={"torch_empty_cache": True})
    assert continued.json() == {"message": "Generation continued successfully.", "status": "ok"}
    assert http.get("/ready").status_code == 200
    assert http.post("/continue_generation", json={"torch_empty_cache": "yes"}).status_code == 400
    assert generate(http, **body)["meta_info"]["completion_tokens"] == 2


def _long_stream(server: RunningServer) -> GenerateStream:
    stream = GenerateStream(server, {"text": PROMPT, "sampling_params": greedy(300, ignore_eos=True), "stream": True})
    stream.start()
    assert stream.started.wait(60), "the stream did not start"
    return stream


def test_a_retracted_request_counts_it(http: httpx.Client, server: RunningServer) -> None:
    """Upstream's `num_retractions`: a retracting pause sends the running request back to the queue."""
    assert generate(http, text=PROMPT, sampling_params=greedy(1))["meta_info"]["num_retractions"] == 0
    stream = _long_stream(server)
    try:
        assert http.post("/pause_generation", json={"mode": "retract"}).status_code == 200
    finally:
        http.post("/continue_generation", json={})
    stream.join(120)
    final = stream.outputs[-1]["meta_info"]
    assert final["completion_tokens"] == 300 and final["num_retractions"] == 1


def test_update_weight_version(http: httpx.Client, server: RunningServer) -> None:
    """Upstream's `weight_version`: in every output and in /server_info; `/update_weight_version`
    changes it, by default after aborting what runs (so no output mixes two labels)."""
    version = http.get("/server_info").json()["weight_version"]
    assert generate(http, text=PROMPT, sampling_params=greedy(1))["meta_info"]["weight_version"] == version
    assert http.post("/update_weight_version", json={"new_version": 7}).status_code == 400
    stream = _long_stream(server)
    try:
        updated = http.post("/update_weight_version", json={"new_version": "step-7"})
        assert updated.json() == {
            "success": True,
            "message": "Weight version updated to step-7",
            "new_version": "step-7",
        }
        stream.join(120)
        final = stream.outputs[-1]["meta_info"]
        assert final["finish_reason"]["type"] == "abort" and final["completion_tokens"] < 300
        assert generate(http, text=PROMPT, sampling_params=greedy(1))["meta_info"]["weight_version"] == "step-7"
        assert http.get("/server_info").json()["weight_version"] == "step-7"
    finally:
        http.post("/update_weight_version", json={"new_version": version, "abort_all_requests": False})
