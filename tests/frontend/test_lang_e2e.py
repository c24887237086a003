"""End to end: frontend programs against our real server on CPU, with the embedded SmolLM2 model.

Slow (the server loads a model): marked `slow`, so it runs with `-m slow` (make test-slow) only.
"""

from __future__ import annotations

import pytest

import sglang as sgl

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def runtime():
    rt = sgl.Runtime(device="cpu", launch_timeout=600, log_level="warning")
    yield rt
    rt.shutdown()


@sgl.function
def qa(s, q):
    s += sgl.user(q)
    s += sgl.assistant(sgl.gen("a", max_tokens=12, temperature=0))


@sgl.function
def pick(s, method):
    s += sgl.user("Pick a fruit.")
    s += sgl.assistant(sgl.select("f", ["apple", "kiwi"], choices_method=method))


def test_chat_generation_uses_the_models_own_template(runtime):
    state = qa.run(q="What is the capital of France?", backend=runtime)
    assert state.text().startswith("<|im_start|>system\n")  # SmolLM2's template injects its system prompt
    assert "Paris" in state["a"]
    meta = state.get_meta_info("a")
    assert meta["prompt_tokens"] > 0 and 0 < meta["completion_tokens"] <= 12


@pytest.mark.parametrize(
    "method", [sgl.token_length_normalized, sgl.greedy_token_selection, sgl.unconditional_likelihood_normalized]
)
def test_select_every_method(runtime, method):
    state = pick.run(method=method, backend=runtime)
    assert state["f"] in ("apple", "kiwi")
    assert len(state.get_meta_info("f")["input_token_logprobs"]) == 2


def test_streaming_and_batch(runtime):
    streamed = qa.run(q="Name a color.", backend=runtime, stream=True)
    pieces = list(streamed.text_iter("a"))
    assert len(pieces) > 1 and "".join(pieces) == streamed["a"]
    greedy = qa.run(q="Name a color.", backend=runtime)["a"]
    batch = qa.run_batch([{"q": "Name a color."}, {"q": "Hi"}], backend=runtime)
    assert batch[0]["a"] == greedy == streamed["a"]  # temperature 0 is deterministic


def test_fork_and_join(runtime):
    @sgl.function
    def two_ways(s):
        s += sgl.user("Say one word.")
        forks = s.fork(2)
        forks += sgl.assistant(sgl.gen("w", max_tokens=4, temperature=0))
        forks.join()

    words = two_ways.run(backend=runtime)["w"]
    assert len(words) == 2 and words[0] == words[1]
