"""Sampling parameters of one `gen` call: program defaults merged with the call's overrides.

`run(..., temperature=0.3)` sets the defaults of every `gen` in the program; a `gen(..., temperature=0)`
overrides them for that call only. `GenParams` holds the overrides (None = inherit); `SamplingParams`
is the fully resolved set a backend receives.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

# Regexes that constrain a `gen(dtype=...)` output, as upstream SGLang defines them (`sglang.lang.ir`).
REGEX_INT = r"[-+]?[0-9]+[ \n]*"
REGEX_FLOAT = r"[-+]?[0-9]*\.?[0-9]+[ \n]*"
REGEX_BOOL = r"(True|False)"
REGEX_STR = r"\"[\w\d\s]*\""  # a quoted string without escapes: what grammar backends compile reliably

_DTYPE_REGEX: dict[Any, str] = {
    int: REGEX_INT,
    "int": REGEX_INT,
    float: REGEX_FLOAT,
    "float": REGEX_FLOAT,
    bool: REGEX_BOOL,
    "bool": REGEX_BOOL,
    str: REGEX_STR,
    "str": REGEX_STR,
    "string": REGEX_STR,
}


def regex_for_dtype(dtype: Any) -> str:
    """The constraining regex of a `gen(dtype=...)`; raises ValueError for an unknown dtype."""
    try:
        return _DTYPE_REGEX[dtype]
    except (KeyError, TypeError):
        raise ValueError(f"gen(dtype=...) must be one of int, float, bool, str; got {dtype!r}") from None


def dtype_stops(dtype: Any) -> list[str]:
    """Numbers end at whitespace: stopping there keeps `int(value)` parseable."""
    return [" ", "\n"] if dtype in (int, "int", float, "float") else []


@dataclass
class GenParams:
    """Per-call overrides of `gen`; every None field inherits the program default."""

    max_new_tokens: int | None = None
    min_new_tokens: int | None = None
    n: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    ignore_eos: bool | None = None
    return_logprob: bool | None = None
    logprob_start_len: int | None = None
    top_logprobs_num: int | None = None
    return_text_in_logprobs: bool | None = None
    dtype: Any = None
    regex: str | None = None
    json_schema: str | None = None


@dataclass
class SamplingParams:
    """The resolved parameters of one generation; defaults are upstream SGLang's `run()` defaults."""

    max_new_tokens: int = 128
    min_new_tokens: int = 0
    n: int = 1
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    ignore_eos: bool = False
    return_logprob: bool | None = None
    logprob_start_len: int | None = None
    top_logprobs_num: int | None = None
    return_text_in_logprobs: bool | None = None
    dtype: Any = None
    regex: str | None = None
    json_schema: str | None = None

    def merged(self, overrides: GenParams, extra_stop: tuple[str, ...] = ()) -> SamplingParams:
        """A new resolved set: `overrides` win where set; `extra_stop` (the chat template's) is appended.

        Never mutates `self`: the same defaults serve every gen of every program in a batch.
        """
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        for f in dataclasses.fields(overrides):
            value = getattr(overrides, f.name)
            if value is not None:
                values[f.name] = value
        values["stop"] = _as_list(values["stop"]) + [s for s in extra_stop if s]
        values["stop_token_ids"] = list(values["stop_token_ids"])
        return SamplingParams(**values)

    def constrained_regex(self) -> str | None:
        """The regex to enforce: a dtype's regex wins over an explicit one (as upstream)."""
        return regex_for_dtype(self.dtype) if self.dtype is not None else self.regex

    def to_srt_kwargs(self) -> dict[str, Any]:
        """The `sampling_params` object of SGLang's native /generate; None values are left out."""
        stop = self.stop + [s for s in dtype_stops(self.dtype) if s not in self.stop]
        out: dict[str, Any] = {
            "max_new_tokens": self.max_new_tokens,
            "min_new_tokens": self.min_new_tokens,
            "n": self.n,
            "stop": stop,
            "stop_token_ids": self.stop_token_ids,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "min_p": self.min_p,
            "frequency_penalty": self.frequency_penalty,
            "presence_penalty": self.presence_penalty,
            "ignore_eos": self.ignore_eos,
            "regex": self.constrained_regex(),
            "json_schema": self.json_schema,
        }
        return {k: v for k, v in out.items() if v is not None}

    def logprob_fields(self) -> dict[str, Any]:
        """The top-level logprob options of a /generate request that the program set explicitly."""
        names = ("return_logprob", "logprob_start_len", "top_logprobs_num", "return_text_in_logprobs")
        return {k: getattr(self, k) for k in names if getattr(self, k) is not None}


def normalize_json_schema(schema: Any) -> str | None:
    """`gen(json_schema=...)` takes a JSON string, a dict, or a pydantic model class."""
    if schema is None or isinstance(schema, str):
        return schema
    if isinstance(schema, dict):
        return json.dumps(schema)
    model_json_schema = getattr(schema, "model_json_schema", None)
    if callable(model_json_schema):
        return json.dumps(model_json_schema())
    raise TypeError(f"json_schema must be a JSON string, a dict or a pydantic model; got {type(schema).__name__}")


def _as_list(stop: str | list[str] | tuple[str, ...] | None) -> list[str]:
    if not stop:
        return []
    return [stop] if isinstance(stop, str) else list(stop)
