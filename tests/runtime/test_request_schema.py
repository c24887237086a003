"""The published request schemas agree with the validation they describe: a sampling value the
schema's ranges accept passes `SamplingParams.validate` and one they refuse fails it, at every
bound; /generate bodies the server serves are valid against the schema, unknown fields are not."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from sglang.runtime.requests.request_schema import SAMPLING_RANGES, generate_schema, sampling_params_schema
from sglang.runtime.requests.sampling_params import SamplingParams, SamplingParamsError

VOCAB = 49152
STEP = 1e-6


def _schema_accepts(schema: dict[str, Any], value: Any) -> bool:
    return jsonschema.Draft202012Validator(schema).is_valid(value)


def _validation_accepts(params: dict[str, Any]) -> bool:
    try:
        SamplingParams.from_dict(params).validate(VOCAB)
    except SamplingParamsError:
        return False
    return True


def _probes(name: str, bounds: dict[str, Any]) -> list[Any]:
    """Values at, just inside and just outside each bound."""
    integer = name in (
        "max_new_tokens",
        "min_new_tokens",
        "n",
        "stream_interval",
        "stop_token_ids",
        "seed",
        "sampling_seed",
    )
    step = 1 if integer else STEP
    values = []
    for key in ("minimum", "maximum", "exclusiveMinimum"):
        if key in bounds.get("items", bounds):
            edge = bounds.get("items", bounds)[key]
            values += [edge - step, edge, edge + step]
    return [[v] for v in values] if "items" in bounds else values


@pytest.mark.parametrize("name", sorted(SAMPLING_RANGES))
def test_every_range_matches_the_validation(name: str) -> None:
    schema = sampling_params_schema()
    extra = {"max_new_tokens": None} if name == "min_new_tokens" else {}
    for value in _probes(name, SAMPLING_RANGES[name]):
        params = {name: value, **extra}
        assert _schema_accepts(schema, params) == _validation_accepts(params), (name, value)


@pytest.mark.parametrize("top_k", [-2, -1, 0, 1, 50])
def test_top_k(top_k: int) -> None:
    params = {"top_k": top_k}
    assert _schema_accepts(sampling_params_schema(), params) == _validation_accepts(params)


def test_missing_features_only_at_their_default() -> None:
    schema = sampling_params_schema()
    for params in ({"beam_width": 2}, {"watermark": {"k": 1}}, {"structural_tag": "{}"}):
        assert not _schema_accepts(schema, params) and not _validation_accepts(params)
    assert _schema_accepts(schema, {"beam_width": 1}) and _validation_accepts({"beam_width": 1})


GOOD_BODIES = [
    {"text": "Hi", "sampling_params": {"max_new_tokens": 4, "temperature": 0, "stop_regex": "a+"}},
    {"input_ids": [[1, 2], [3]], "sampling_params": [{"n": 2}, {"top_k": -1}], "rid": ["a", "b"]},
    {"text": ["a", "b"], "return_logprob": [True, False], "stream": False, "lora_path": None},
    {"text": "Hi", "routed_dp_rank": 0, "return_hidden_states": False, "image_data": None},
]
BAD_BODIES = [
    {"text": "Hi", "max_new_tokens": 1},
    {"text": "Hi", "sampling_params": {"temprature": 0}},
    {"text": "Hi", "sampling_params": {"top_p": 0}},
    {"text": ""},
    {"input_ids": [-1]},
    {"text": "Hi", "routed_dp_rank": 1},
    {"text": "Hi", "lora_path": 3},  # a name (or a list of names); which are loaded is known at run time
    {"text": "Hi", "image_data": "http://x/cat.png"},
]


@pytest.mark.parametrize("body", GOOD_BODIES)
def test_bodies_the_server_serves_are_valid(body: dict[str, Any]) -> None:
    jsonschema.validate(body, generate_schema(), jsonschema.Draft202012Validator)


@pytest.mark.parametrize("body", BAD_BODIES)
def test_bodies_the_server_refuses_are_not(body: dict[str, Any]) -> None:
    assert not _schema_accepts(generate_schema(), body)
