"""`Engine` end to end (tokenizer manager, scheduler and detokenizer processes) on the embedded
model: text and input_ids prompts, streaming, batches, n, logprobs, validation errors, client
aborts, control calls, and the death of a child process."""

from __future__ import annotations

import asyncio
import gzip
import itertools
import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from sglang.ci.servers import CPU_THREADS, DEVICE
from sglang.runtime.engine import Engine
from sglang.runtime.processes.tokenizer_manager import EngineDeadError
from sglang.runtime.requests.generate_input import InvalidRequestError

from .runtime_harness import QUESTION

GREEDY = {"temperature": 0.0, "max_new_tokens": 8}
ANSWER = "The capital of France is Paris."


def chat_text(engine: Engine, question: str = QUESTION) -> str:
    messages = [{"role": "user", "content": question}]
    return engine.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def test_text_and_input_ids_prompts_give_the_same_output(engine: Engine) -> None:
    text = chat_text(engine)
    by_text = engine.generate(text, GREEDY)
    by_ids = engine.generate(input_ids=engine.tokenizer.encode(text, add_special_tokens=False), sampling_params=GREEDY)
    assert by_text["text"] == ANSWER
    assert by_ids["output_ids"] == by_text["output_ids"]
    assert by_ids["text"] == ANSWER
    meta = by_text["meta_info"]
    assert meta["prompt_tokens"] == 37
    assert meta["completion_tokens"] == 8
    assert meta["finish_reason"] == {"type": "stop", "matched": 2}


def test_stream_chunks_are_cumulative_and_end_with_the_finish_reason(engine: Engine) -> None:
    chunks = list(engine.generate(chat_text(engine), GREEDY, stream=True))
    assert len(chunks) > 1
    for before, after in itertools.pairwise(chunks):
        assert after["text"].startswith(before["text"])
        assert after["output_ids"][: len(before["output_ids"])] == before["output_ids"]
    assert all(c["meta_info"]["finish_reason"] is None for c in chunks[:-1])
    assert chunks[-1]["meta_info"]["finish_reason"] == {"type": "stop", "matched": 2}
    assert chunks[-1]["text"] == ANSWER


def test_batch_keeps_prompt_order_and_per_prompt_parameters(engine: Engine) -> None:
    prompts = [chat_text(engine), "The river wound through the valley", chat_text(engine, "Name a colour.")]
    params = [GREEDY, {**GREEDY, "max_new_tokens": 3}, {**GREEDY, "max_new_tokens": 5, "ignore_eos": True}]
    batch = engine.generate(prompts, params)
    assert isinstance(batch, list) and len(batch) == 3
    singles = [engine.generate(p, sp) for p, sp in zip(prompts, params)]
    assert [b["output_ids"] for b in batch] == [s["output_ids"] for s in singles]
    assert [b["meta_info"]["completion_tokens"] for b in batch] == [8, 3, 5]


def test_n_samples_share_the_prompt_kv(engine: Engine) -> None:
    text = chat_text(engine, "Write a story about a dragon.")
    prompt_len = len(engine.tokenizer.encode(text, add_special_tokens=False))
    outs = engine.generate(text, {"temperature": 1.0, "seed": 5, "n": 3, "max_new_tokens": 6})
    assert isinstance(outs, list) and len(outs) == 3
    assert len({tuple(o["output_ids"]) for o in outs}) >= 2, "the n samples differ"
    assert all(o["meta_info"]["cached_tokens"] == prompt_len - 1 for o in outs)
    again = engine.generate(text, {"temperature": 1.0, "seed": 5, "n": 3, "max_new_tokens": 6})
    assert [o["output_ids"] for o in again] == [o["output_ids"] for o in outs], "seeded n samples repeat"


def test_logprobs_with_text(engine: Engine) -> None:
    out = engine.generate(
        chat_text(engine),
        GREEDY,
        return_logprob=True,
        logprob_start_len=30,
        top_logprobs_num=2,
        return_text_in_logprobs=True,
    )
    meta = out["meta_info"]
    assert [text for _, _, text in meta["output_token_logprobs"]][:2] == ["The", " capital"]
    assert len(meta["input_token_logprobs"]) == 37 - 30
    assert all(len(top) == 2 for top in meta["output_top_logprobs"])
    assert meta["output_top_logprobs"][0][0][2] == "The", "top logprobs carry their tokens' text too"
    scored = [lp for lp, _, _ in meta["input_token_logprobs"]]
    assert meta["normalized_prompt_logprob"] == pytest.approx(sum(scored) / len(scored))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("temperature", -0.5),
        ("top_p", 0.0),
        ("top_p", 1.5),
        ("top_k", 0),
        ("min_p", 1.5),
        ("frequency_penalty", 2.5),
        ("presence_penalty", -3.0),
        ("repetition_penalty", 0.0),
        ("max_new_tokens", -1),
        ("min_new_tokens", 20),  # above max_new_tokens
        ("n", 0),
        ("stop_token_ids", [10**6]),
        ("logit_bias", {"999999": 1.0}),
        ("regex", "(unclosed"),
        ("json_schema", "{not json"),
        ("no_such_parameter", 1),
    ],
)
def test_out_of_range_values_are_rejected_naming_the_field(engine: Engine, field: str, value: Any) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        engine.generate("Hello", {"max_new_tokens": 8, field: value})
    assert caught.value.param == f"sampling_params.{field}"
    assert field in str(caught.value) or caught.value.param.endswith(field)


def test_invalid_request_fields_are_rejected(engine: Engine) -> None:
    with pytest.raises(InvalidRequestError, match="input_ids"):
        engine.generate(input_ids=[1, 2, 10**7])
    with pytest.raises(InvalidRequestError):
        engine.generate("")
    with pytest.raises(InvalidRequestError, match="no tokens once tokenized"):
        engine.generate("\x1d")  # a control character the tokenizer drops (found by tests/e2e/test_fuzz.py)
    with pytest.raises(InvalidRequestError, match="logprob_start_len"):
        engine.generate("Hello", GREEDY, return_logprob=True, logprob_start_len=50)
    # The same type checks as a /generate body: a numeric rid or a truthy non-boolean is refused.
    with pytest.raises(InvalidRequestError, match="rid must be a string") as caught:
        engine.generate("Hello", GREEDY, rid=7)
    assert caught.value.param == "rid"
    with pytest.raises(InvalidRequestError, match="stream must be a boolean"):
        engine.generate("Hello", GREEDY, stream="yes")
    assert engine.healthy


def test_async_generate_and_async_stream(engine: Engine) -> None:
    async def main() -> tuple[dict, list[dict]]:
        single = await engine.async_generate(chat_text(engine), GREEDY)
        stream = await engine.async_generate(chat_text(engine), GREEDY, stream=True)
        return single, [chunk async for chunk in stream]

    single, chunks = asyncio.run(main())
    assert single["text"] == ANSWER
    assert chunks[-1]["text"] == ANSWER and chunks[-1]["meta_info"]["finish_reason"] is not None


def _wait_until_idle(engine: Engine, timeout: float = 10.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        info = engine.get_server_info()
        if info["num_running_requests"] == 0 and info["num_waiting_requests"] == 0:
            return info
        assert time.monotonic() < deadline, f"the engine is still busy: {info}"
        time.sleep(0.1)


def test_closing_a_stream_aborts_its_request(engine: Engine) -> None:
    stream = engine.generate("Count to one thousand:", {"max_new_tokens": 1000, "ignore_eos": True}, stream=True)
    for _, _chunk in zip(range(3), stream):
        pass
    stream.close()
    info = _wait_until_idle(engine)
    assert info["kv_tokens_free"] + info["kv_tokens_cached"] == info["kv_tokens_total"]


def test_flush_cache_and_server_info(engine: Engine) -> None:
    engine.generate(chat_text(engine), GREEDY)
    before = _wait_until_idle(engine)
    assert before["kv_tokens_cached"] > 0
    assert engine.flush_cache() is True
    after = engine.get_server_info()
    assert after["kv_tokens_cached"] == 0
    assert after["kv_tokens_free"] == after["kv_tokens_total"]
    assert engine.generate(chat_text(engine), GREEDY)["meta_info"]["cached_tokens"] == 0


PAUSED = {"temperature": 0.0, "max_new_tokens": 24, "ignore_eos": True}


def _in_thread(call: Any) -> tuple[threading.Thread, dict[str, Any]]:
    result: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: result.update(out=call()))
    thread.start()
    return thread, result


def test_pause_in_place_holds_every_request_and_continue_resumes(engine: Engine) -> None:
    """Upstream's `pause_generation("in_place")`: no step runs (a running stream stops, a new
    request waits), and after `continue_generation` both finish, the stream with the tokens it
    would have made unpaused (its KV kept)."""
    expected = engine.generate(chat_text(engine), PAUSED)["output_ids"]
    stream = engine.generate(chat_text(engine), PAUSED, stream=True)
    next(stream)
    engine.pause_generation("in_place")
    made = engine.get_server_info()["generation_tokens"]
    waiter, waited = _in_thread(lambda: engine.generate(chat_text(engine, "Name a color."), GREEDY))
    time.sleep(0.5)
    assert waiter.is_alive() and engine.get_server_info()["generation_tokens"] == made
    engine.continue_generation()
    *_, last = stream
    waiter.join(timeout=60)
    assert last["output_ids"] == expected and waited["out"]["meta_info"]["completion_tokens"] > 0


def test_pause_retract_and_abort(engine: Engine) -> None:
    """`retract`: the running request goes back to the queue and finishes after `continue`;
    `abort` (the default): it ends at once, with the reason."""
    retracted = engine.get_server_info()["retractions"]
    stream = engine.generate(chat_text(engine), PAUSED, stream=True)
    next(stream)
    engine.pause_generation("retract")
    info = engine.get_server_info()
    assert (info["num_running_requests"], info["retractions"]) == (0, retracted + 1)
    engine.continue_generation(torch_empty_cache=False)
    *_, last = stream
    assert last["meta_info"]["completion_tokens"] == PAUSED["max_new_tokens"]

    stream = engine.generate(chat_text(engine), PAUSED, stream=True)
    next(stream)
    engine.pause_generation()
    *_, last = stream
    assert last["meta_info"]["finish_reason"]["type"] == "abort"
    assert "paused" in last["meta_info"]["finish_reason"]["message"]
    engine.continue_generation()
    assert engine.generate(chat_text(engine), GREEDY)["text"] == ANSWER
    with pytest.raises(ValueError, match="mode must be one of"):
        engine.pause_generation("later")  # type: ignore[arg-type]


def test_profile_records_the_scheduler_steps(engine: Engine, tmp_path: Path) -> None:
    """Upstream's `Engine.start_profile` / `stop_profile`: a trace of the scheduler's kernels."""
    with pytest.raises(RuntimeError, match="not in progress"):
        engine.stop_profile()
    engine.start_profile(output_dir=str(tmp_path), num_steps=3, profile_id="engine")
    with pytest.raises(RuntimeError, match="already in progress"):
        engine.start_profile(output_dir=str(tmp_path))
    engine.generate(chat_text(engine), GREEDY)  # 8 model steps: the profile ends after its 3
    (trace,) = tmp_path.iterdir()
    assert trace.name == "engine-TP-0.trace.json.gz"
    with gzip.open(trace, "rt") as f:
        names = {event.get("name", "") for event in json.load(f)["traceEvents"]}
    assert any(name.startswith(("aten::", "sglang_")) for name in names), sorted(names)[:20]
    with pytest.raises(RuntimeError, match="not in progress"):
        engine.stop_profile()


@pytest.mark.slow
def test_scheduler_death_fails_pending_and_new_requests() -> None:
    engine = Engine(device=DEVICE, max_total_tokens=2048, cpu_threads=CPU_THREADS, log_level="critical")
    try:
        outcome: dict[str, BaseException | dict] = {}

        def long_request() -> None:
            try:
                outcome["result"] = engine.generate("Count:", {"max_new_tokens": 4000, "ignore_eos": True})
            except BaseException as e:
                outcome["result"] = e

        waiter = threading.Thread(target=long_request)
        waiter.start()
        time.sleep(1.0)
        scheduler = engine.children.processes[0]
        assert scheduler.name == "sglang-scheduler"
        os.kill(scheduler.pid, signal.SIGKILL)
        killed = time.monotonic()
        waiter.join(10)
        assert not waiter.is_alive(), "the pending request did not fail"
        assert time.monotonic() - killed < 5
        assert isinstance(outcome["result"], EngineDeadError)
        assert "scheduler" in str(outcome["result"])
        assert not engine.healthy
        with pytest.raises(EngineDeadError):
            engine.generate("Hello", GREEDY)
    finally:
        engine.shutdown()


def test_sessions_and_weight_routes_on_the_engine(engine: Engine) -> None:
    """Upstream's `Engine.open_session` / `close_session` with `session_params`, and the weight
    methods: a reload of the served checkpoint keeps the answers; a missing one is refused."""
    sid = engine.open_session(capacity_of_str_len=1000)
    first = engine.generate(chat_text(engine), GREEDY, rid=f"{sid}-1", session_params={"id": sid})
    second = engine.generate(" More.", GREEDY, session_params={"id": sid, "rid": f"{sid}-1"})
    assert second["meta_info"]["cached_tokens"] >= first["meta_info"]["prompt_tokens"]
    assert second["meta_info"]["prompt_tokens"] > first["meta_info"]["prompt_tokens"] + len(first["output_ids"])
    with pytest.raises(InvalidRequestError, match="already open"):
        engine.open_session(10, session_id=sid)
    with pytest.raises(InvalidRequestError, match="enable_streaming_session"):
        engine.open_session(10, streaming=True)
    engine.close_session(sid)
    with pytest.raises(InvalidRequestError, match="does not exist"):
        engine.generate("Hi", GREEDY, session_params={"id": sid})

    norm = engine.get_weights_by_name("model.norm.weight", truncate_size=4)
    success, message, _ = engine.update_weights_from_disk(engine.info.model_path)
    assert success, message
    assert engine.get_weights_by_name("model.norm.weight", truncate_size=4) == norm
    assert engine.generate(chat_text(engine), GREEDY)["output_ids"] == first["output_ids"]
    assert engine.update_weights_from_disk("/nonexistent/model.gguf")[0] is False
