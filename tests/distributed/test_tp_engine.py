"""The embedded SmolLM2-135M with `--tp-size 2` (two rank processes over gloo): the same greedy
tokens as tp=1 for the three chat prompts of the real-model test, and a rank killed with
SIGKILL fails the pending request with a clear error within 5 s and leaves no rank behind."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest

from sglang.ci.suites.real_model import MAX_NEW_TOKENS, PROMPTS, chat_ids, greedy_ours
from sglang.runtime.engine import Engine
from sglang.runtime.loader.model_loading import LoadedModel, load_model
from sglang.runtime.processes.tokenizer_manager import EngineDeadError
from sglang.runtime.server_args import ServerArgs

pytestmark = pytest.mark.slow  # two engines of two rank processes each: minutes on 2 cores

ENGINE_ARGS = {"device": "cpu", "dtype": "float32", "cpu_threads": 1, "max_total_tokens": 2048}


@pytest.fixture(scope="module")
def tp1_model() -> LoadedModel:
    return load_model(ServerArgs(device="cpu", dtype="float32"))


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    with Engine(tp_size=2, **ENGINE_ARGS) as engine:
        yield engine


def test_tp2_greedy_tokens_equal_tp1(engine: Engine, tp1_model: LoadedModel) -> None:
    tokenizer = tp1_model.load_tokenizer()
    prompts = [chat_ids(tokenizer, question) for question in PROMPTS]
    params = {"temperature": 0.0, "max_new_tokens": MAX_NEW_TOKENS}
    outs = engine.generate(input_ids=prompts, sampling_params=params)  # decoded together, one batch
    for prompt, out in zip(prompts, outs):
        assert out["output_ids"] == greedy_ours(tp1_model, prompt, tokenizer.eos_token_id)
    assert "Paris" in outs[0]["text"]


def test_tp2_ranks_are_processes_of_the_engine(engine: Engine) -> None:
    names = [p.name for p in engine.children.processes]
    assert "sglang-tp-rank-1" in names and all(p.is_alive() for p in engine.children.processes)
    time.sleep(2.5)  # idle past two heartbeats: the follower is still waiting, not timed out
    assert engine.healthy and all(p.is_alive() for p in engine.children.processes)


def test_killed_rank_fails_pending_request_within_5s() -> None:
    with Engine(tp_size=2, **ENGINE_ARGS) as engine:
        follower = next(p for p in engine.children.processes if p.name == "sglang-tp-rank-1")
        stream = engine.generate("Count to one thousand:", {"max_new_tokens": 1500, "ignore_eos": True}, stream=True)
        next(stream)  # decoding has started
        os.kill(follower.pid, signal.SIGKILL)
        killed = time.monotonic()
        with pytest.raises(EngineDeadError, match="tp-rank-1 process exited unexpectedly"):
            for _ in stream:
                pass
        assert time.monotonic() - killed < 5.0
        assert not engine.healthy
        # Rank 0 notices in its next collective and exits too: nothing is left in a collective.
        scheduler = next(p for p in engine.children.processes if p.name == "sglang-scheduler")
        scheduler.join(10)
        assert not scheduler.is_alive()
        with pytest.raises(EngineDeadError):
            engine.generate("Hello", {"max_new_tokens": 2})
