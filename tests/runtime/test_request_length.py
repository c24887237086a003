"""A request's length against the context, checked at admission before it is queued:
a prompt must leave room for one new token, and a max_new_tokens the client set must fit with
the prompt (upstream's check and words); `--allow-auto-truncate` cuts both instead."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sglang.runtime.processes.admission import Admission
from sglang.runtime.requests.generate_input import GenerateInput, InvalidRequestError

from . import runtime_harness as harness

CONTEXT = 16
INFO = replace(harness.INFO, context_length=CONTEXT, vocab_size=8)


class _OneTokenPerCharacter:
    def get_vocab(self) -> dict[str, int]:
        return {"a": 1}

    def encode(self, text: str) -> list[int]:
        return [1] * len(text)


def _prepared(body: dict, allow_auto_truncate: bool = False) -> list[list[int]] | list[int]:
    """The input ids admitted for each prompt of `body` (a single prompt's alone), or the first
    refused prompt's InvalidRequestError."""
    admission = Admission(INFO, _OneTokenPerCharacter(), allow_auto_truncate)
    prepared = [admission.prepare(item).input_ids for item in GenerateInput.from_dict(body).split()]
    return prepared if isinstance(body["text"], list) else prepared[0]


def _body(prompt_tokens: int, **params: object) -> dict:
    return {"text": "a" * prompt_tokens, "sampling_params": params}


def test_prompt_and_max_new_tokens_may_fill_the_context() -> None:
    assert len(_prepared(_body(10, max_new_tokens=CONTEXT - 10))) == 10


def test_max_new_tokens_past_the_context_is_refused_in_upstreams_words() -> None:
    with pytest.raises(InvalidRequestError) as refused:
        _prepared(_body(10, max_new_tokens=CONTEXT - 9))
    assert refused.value.param == "sampling_params.max_new_tokens"
    assert str(refused.value).startswith(
        f"Requested token count exceeds the model's maximum context length of {CONTEXT} tokens. "
        f"You requested a total of {CONTEXT + 1} tokens: 10 tokens from the input messages and 7 tokens"
    )


@pytest.mark.parametrize("params", [{}, {"max_new_tokens": None}])
def test_an_unset_max_new_tokens_is_not_checked(params: dict) -> None:
    """The default (128) and None stop at the context length in the scheduler, as upstream."""
    assert len(_prepared(_body(10, **params))) == 10


@pytest.mark.parametrize("prompt_tokens", [CONTEXT, 100 * CONTEXT])
def test_a_prompt_that_fills_the_context_is_refused(prompt_tokens: int) -> None:
    with pytest.raises(InvalidRequestError, match="context length") as refused:
        _prepared(_body(prompt_tokens, max_new_tokens=1))
    assert refused.value.param == "text"


@pytest.mark.parametrize("prompt_tokens", [CONTEXT, 100 * CONTEXT])
def test_auto_truncate_keeps_a_long_prompts_start(prompt_tokens: int) -> None:
    ids = _prepared(_body(prompt_tokens, max_new_tokens=1), allow_auto_truncate=True)
    assert len(ids) == CONTEXT - 1


def test_auto_truncate_accepts_max_new_tokens_past_the_context() -> None:
    assert len(_prepared(_body(10, max_new_tokens=10**9), allow_auto_truncate=True)) == 10


@pytest.mark.parametrize("sampling_params", ["greedy", [1], [{"max_new_tokens": 1}]])
def test_sampling_params_must_be_objects(sampling_params: object) -> None:
    with pytest.raises(InvalidRequestError) as refused:
        _prepared({"text": "a", "sampling_params": sampling_params})
    assert refused.value.param == "sampling_params"


def test_each_prompt_of_a_batch_is_checked_with_its_own_length() -> None:
    assert [len(ids) for ids in _prepared({"text": ["a" * 4, "a" * 11], "sampling_params": {"max_new_tokens": 5}})] == [
        4,
        11,
    ]
    with pytest.raises(InvalidRequestError, match="4 tokens from the input messages"):
        _prepared({"text": ["a" * 11, "a" * 4], "sampling_params": [{"max_new_tokens": 5}, {"max_new_tokens": 13}]})
