"""JSON schemas of the native request bodies, derived from the types that validate them, for the
OpenAPI document (and so for schema-driven fuzzers and generated clients).

`/generate` reads its body by hand (`GenerateInput.from_dict`, `SamplingParams.from_dict`), so
FastAPI cannot see its shape; these schemas publish it as strictly as it is checked: every field
with its type, unknown fields refused, the ranges `SamplingParams.validate` enforces
(`SAMPLING_RANGES`; a test holds the two together), and upstream's fields whose feature is
missing accepted only at their default, exactly one of `text` and `input_ids`. Other
cross-field rules (`min_new_tokens <= max_new_tokens`, ids within the served vocabulary) stay
with the validation alone.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from typing import Any

from pydantic import TypeAdapter

from sglang.runtime.requests import upstream_fields
from sglang.runtime.requests.generate_input import GenerateInput
from sglang.runtime.requests.sampling_params import (
    MAX_STOP_REGEX_BYTES,
    MAX_STOP_REGEX_COUNT,
    SEED_MAX,
    SEED_MIN,
    SamplingParams,
)

SAMPLING_RANGES: dict[str, dict[str, Any]] = {
    "temperature": {"minimum": 0},
    "top_p": {"exclusiveMinimum": 0, "maximum": 1},
    "min_p": {"minimum": 0, "maximum": 1},
    "frequency_penalty": {"minimum": -2, "maximum": 2},
    "presence_penalty": {"minimum": -2, "maximum": 2},
    "repetition_penalty": {"exclusiveMinimum": 0, "maximum": 2},
    "max_new_tokens": {"minimum": 0},
    "min_new_tokens": {"minimum": 0},
    "n": {"minimum": 1},
    "stream_interval": {"minimum": 1},
    "stop_token_ids": {"items": {"minimum": 0}},
    "seed": {"minimum": SEED_MIN, "maximum": SEED_MAX},
    "sampling_seed": {"minimum": SEED_MIN, "maximum": SEED_MAX},
}
"""JSON Schema bounds of the sampling fields, as `SamplingParams.validate` checks them (a bound
on an array's items applies to each item). `top_k` (-1 or at least 1) is in `_TOP_K`."""

_TOP_K = {"anyOf": [{"const": -1}, {"type": "integer", "minimum": 1}, {"type": "null"}]}
_STOP_REGEX_ITEM = {"type": "string", "maxLength": MAX_STOP_REGEX_BYTES}
_STOP_REGEX = {
    "anyOf": [
        _STOP_REGEX_ITEM,
        {"type": "array", "items": _STOP_REGEX_ITEM, "maxItems": MAX_STOP_REGEX_COUNT},
        {"type": "null"},
    ]
}


def _type_schema(hint: Any) -> dict[str, Any]:
    return TypeAdapter(hint).json_schema() if hint is not Any else {}


def _nullable(schema: dict[str, Any], bounds: dict[str, Any] | None = None) -> dict[str, Any]:
    """`schema` or null; `bounds` constrain the non-null values (JSON Schema applies `minimum`
    only to numbers, `items` only to arrays, so they sit beside the `anyOf`)."""
    arms = schema.get("anyOf", [schema])
    if {"type": "null"} not in arms:
        arms = [*arms, {"type": "null"}]
    return {"anyOf": arms, **(bounds or {})}


_JSON_TYPES = {bool: "boolean", int: "integer"}


def missing_feature_schema(field: upstream_fields.Missing) -> dict[str, Any]:
    """Null or the field's default, alone or one per prompt. The default's type is spelled out:
    `false` is not `0` here (`Missing.accepts`), though `const` alone lets generators mix them."""
    one: list[dict[str, Any]] = [{"type": "null"}]
    if field.default is not None:
        one.append({"type": _JSON_TYPES[type(field.default)], "const": field.default})
    return {"anyOf": [*one, {"type": "array", "items": {"anyOf": one}}]}


@functools.cache
def sampling_params_schema() -> dict[str, Any]:
    """The `sampling_params` object: null for any field means its default, as upstream."""
    hints = typing.get_type_hints(SamplingParams)
    properties = {}
    for f in dataclasses.fields(SamplingParams):
        properties[f.name] = _nullable(_type_schema(hints[f.name]), SAMPLING_RANGES.get(f.name))
    properties["top_k"] = _TOP_K
    properties["stop_regex"] = _STOP_REGEX
    # Refused by `validate` unless at their default, as their feature is missing.
    properties["beam_width"] = {"anyOf": [{"const": 1}, {"type": "null"}]}
    properties["structural_tag"] = properties["watermark"] = {"type": "null"}
    return {"type": "object", "properties": properties, "additionalProperties": False}


@functools.cache
def generate_schema() -> dict[str, Any]:
    """The body of `/generate`: one prompt or a batch, per-prompt lists where fields allow them."""
    hints = typing.get_type_hints(GenerateInput)
    sampling = sampling_params_schema()
    properties = {f.name: _type_schema(hints[f.name]) for f in dataclasses.fields(GenerateInput)}
    schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
        "examples": [{"text": "The capital of France is", "sampling_params": {"max_new_tokens": 8, "temperature": 0}}],
    }
    properties["sampling_params"] = {
        "anyOf": [sampling, {"type": "array", "items": sampling}, {"type": "null"}],
    }
    properties["image_data"] = {"type": "null"}  # no served architecture has vision
    # Exactly one of text and input_ids (null counts as absent).
    schema["anyOf"] = [
        {"required": ["text"], "properties": {"text": {"not": {"type": "null"}}, "input_ids": {"type": "null"}}},
        {"required": ["input_ids"], "properties": {"input_ids": {"not": {"type": "null"}}, "text": {"type": "null"}}},
    ]
    texts = {"type": "array", "items": {"type": "string"}, "minItems": 1}
    properties["text"] = {"anyOf": [{"type": "string", "minLength": 1}, texts, {"type": "null"}]}
    ids = {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 1}
    batch = {"type": "array", "items": ids, "minItems": 1}
    properties["input_ids"] = {"anyOf": [ids, batch, {"type": "null"}]}
    for name, field in upstream_fields.GENERATE.items():
        properties[name] = missing_feature_schema(field)
    return schema


ABORT_REQUEST_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"rid": {"type": "string", "description": "the id of the request to abort"}},
    "required": ["rid"],
}
"""`/abort_request`: other keys (upstream's `abort_all`, say) are read by nothing and allowed."""


def openapi_body(schema: dict[str, Any]) -> dict[str, Any]:
    """An OpenAPI operation's `requestBody` holding `schema` (for a route's `openapi_extra`)."""
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}
