"""GenerateInput: upstream's top-level fields, the types that would otherwise pass silently."""

from __future__ import annotations

from typing import Any

import pytest

from sglang.runtime.requests.generate_input import GenerateInput, InvalidRequestError


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"rid": 5}, "rid"),
        ({"rid": ["a", 2]}, "rid"),
        ({"stream": "yes"}, "stream"),
        ({"stream": 1}, "stream"),
        ({"log_metrics": "no"}, "log_metrics"),
        ({"model": 3}, "model"),
        ({"lora_path": 3}, "lora_path"),
        ({"lora_path": ["a", 2]}, "lora_path"),
        ({"lora_id": "adapter"}, "lora_id"),
        ({"data_parallel_rank": 1}, "data_parallel_rank"),
        ({"data_parallel_rank": False}, "data_parallel_rank"),
        ({"background": True}, "background"),
        ({"nonsense": 1}, "nonsense"),
    ],
)
def test_refused_naming_the_field(extra: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        GenerateInput.from_dict({"text": "Hi", **extra})
    assert info.value.param == param


def test_router_defaults_accepted() -> None:
    obj = GenerateInput.from_dict(
        {
            "text": "Hi",
            "model": "unknown",
            "lora_path": None,
            "data_parallel_rank": 0,
            "background": False,
            "return_hidden_states": False,
            "bootstrap_host": None,
            "session_id": "s",
            "no_logs": True,
        }
    )
    assert obj.model == "unknown" and obj.split()[0].text == "Hi"


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"bootstrap_room": 7}, "bootstrap_host"),
        ({"bootstrap_host": "h", "bootstrap_port": "8998", "bootstrap_room": 7}, "bootstrap_port"),
        ({"bootstrap_host": "h", "bootstrap_port": 8998, "bootstrap_room": -1}, "bootstrap_room"),
    ],
)
def test_incomplete_bootstrap_refused_naming_the_field(extra: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        GenerateInput.from_dict({"text": "Hi", **extra}).split()
    assert info.value.param == param


def test_bootstrap_fields_reach_the_single_inputs_per_prompt() -> None:
    body = {"text": ["a", "b"], "bootstrap_host": "h", "bootstrap_port": 8998, "bootstrap_room": [5, 6]}
    items = GenerateInput.from_dict(body).split()
    assert [(i.bootstrap.host, i.bootstrap.port, i.bootstrap.room) for i in items] == [("h", 8998, 5), ("h", 8998, 6)]
    assert GenerateInput.from_dict({"text": "a"}).split()[0].bootstrap is None


def test_a_batch_rid_string_prefixes_the_prompts() -> None:
    items = GenerateInput.from_dict({"text": ["a", "b"], "rid": "r"}).split()
    assert [i.rid for i in items] == ["r-0", "r-1"]
    assert [i.rid for i in GenerateInput.from_dict({"text": ["a", "b"], "rid": ["x", "y"]}).split()] == ["x", "y"]


def test_a_rid_list_for_one_prompt_takes_one_entry() -> None:
    """The schema fuzzer found a 500 here: a two-entry rid list on a one-prompt chat request."""
    assert [i.rid for i in GenerateInput.from_dict({"text": "a", "rid": ["x"]}).split()] == ["x"]
    with pytest.raises(InvalidRequestError, match="rid has 2 entries for 1 prompt"):
        GenerateInput.from_dict({"text": "a", "rid": ["x", "y"]}).split()


def test_implemented_flags_reach_the_single_inputs() -> None:
    (item,) = GenerateInput.from_dict(
        {"text": "Hi", "log_metrics": False, "return_entropy": True, "return_prompt_token_ids": True}
    ).split()
    assert not item.log_metrics and item.logprobs.return_entropy and item.return_prompt_token_ids
