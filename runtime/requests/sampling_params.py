"""A request's sampling parameters: SGLang's fields and defaults, parsing and validation.

This dataclass is the one typed definition of the sampling fields: the OpenAI routes derive
their SGLang extras from it. It has every field of upstream SGLang's `SamplingParams` API; those
whose feature this server lacks (`beam_width` > 1, `structural_tag`, `watermark`) are accepted
at their default and refused by `validate` otherwise, naming the feature.

`from_dict` is the boundary for untrusted input (the HTTP `sampling_params` object): it rejects
unknown fields and wrong types; `null` means the default, as upstream, for a field that has no
meaning for null. `validate` checks ranges against the model's vocabulary. `normalize` turns a
valid instance into the canonical form the sampler consumes. Every error is a
`SamplingParamsError` naming the offending field, so the server can report it as such.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sglang.runtime.requests.stop_regex import compiled as compiled_stop_regex

# What a disabled top-k (-1) becomes after `normalize`: more than any vocabulary, so nothing is cut.
TOP_K_ALL = 1 << 30
# Temperatures below this are greedy; dividing logits by them would overflow.
_GREEDY_EPS = 1e-6
# As upstream: bounds that keep the per-token stop_regex check cheap.
MAX_STOP_REGEX_COUNT = 32
MAX_STOP_REGEX_BYTES = 256
# A seed seeds a 64-bit generator (torch's `manual_seed`, which fails past 64 bits): int64's range,
# so that the per-choice seeds of n > 1 (`seed + j`) stay within what it takes.
SEED_MIN, SEED_MAX = -(1 << 63), (1 << 63) - 1


class SamplingParamsError(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass
class SamplingParams:
    """Defaults are SGLang's. `max_new_tokens=None` means up to the context length; `top_k=-1`
    disables top-k; `logit_bias` maps token ids (as strings, as in JSON) to additive biases.
    `seed` is ours, `sampling_seed` upstream's name for it. `stream_interval`: a streaming
    request gets an update every that many tokens. `custom_params` is carried for a custom logit
    processor, as upstream (none is configurable here, so it changes nothing)."""

    max_new_tokens: int | None = 128
    min_new_tokens: int = 0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    stop_regex: str | list[str] | None = None
    ignore_eos: bool = False
    n: int = 1
    seed: int | None = None
    sampling_seed: int | None = None
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    logit_bias: dict[str, float] | None = None
    json_schema: str | None = None
    regex: str | None = None
    ebnf: str | None = None
    no_stop_trim: bool = False
    stream_interval: int | None = None
    custom_params: dict[str, Any] | None = None
    beam_width: int | None = None
    structural_tag: str | None = None
    watermark: dict[str, Any] | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> SamplingParams:
        """Parses a JSON-like mapping; ints are accepted where floats are expected."""
        values = {}
        for name, value in (d or {}).items():
            if name not in _FIELD_TYPES:
                raise SamplingParamsError(name, "unknown sampling parameter")
            if value is None and not _accepts_none(_FIELD_TYPES[name]):
                continue
            coerced = _coerce(value, _FIELD_TYPES[name])
            if coerced is _MISMATCH:
                expected = _type_name(_FIELD_TYPES[name])
                raise SamplingParamsError(name, f"expected {expected}, got {type(value).__name__}")
            values[name] = coerced
        return cls(**values)

    def validate(self, vocab_size: int) -> None:
        """Raises `SamplingParamsError` for the first out-of-range field."""
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise SamplingParamsError(f.name, f"must be finite, got {value}")
        if self.temperature < 0:
            raise SamplingParamsError("temperature", f"must be non-negative, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise SamplingParamsError("top_p", f"must be in (0, 1], got {self.top_p}")
        if self.top_k == 0 or self.top_k < -1:
            raise SamplingParamsError("top_k", f"must be -1 (disabled) or at least 1, got {self.top_k}")
        if not 0 <= self.min_p <= 1:
            raise SamplingParamsError("min_p", f"must be in [0, 1], got {self.min_p}")
        for name in ("frequency_penalty", "presence_penalty"):
            if not -2 <= getattr(self, name) <= 2:
                raise SamplingParamsError(name, f"must be in [-2, 2], got {getattr(self, name)}")
        if not 0 < self.repetition_penalty <= 2:
            raise SamplingParamsError("repetition_penalty", f"must be in (0, 2], got {self.repetition_penalty}")
        if self.max_new_tokens is not None and self.max_new_tokens < 0:
            raise SamplingParamsError("max_new_tokens", f"must be non-negative, got {self.max_new_tokens}")
        if self.min_new_tokens < 0:
            raise SamplingParamsError("min_new_tokens", f"must be non-negative, got {self.min_new_tokens}")
        if self.max_new_tokens is not None and self.min_new_tokens > self.max_new_tokens:
            raise SamplingParamsError(
                "min_new_tokens", f"{self.min_new_tokens} exceeds max_new_tokens={self.max_new_tokens}"
            )
        if self.n < 1:
            raise SamplingParamsError("n", f"must be at least 1, got {self.n}")
        if self.stream_interval is not None and self.stream_interval < 1:
            raise SamplingParamsError("stream_interval", f"must be at least 1, got {self.stream_interval}")
        for name in ("seed", "sampling_seed"):
            seed = getattr(self, name)
            if seed is not None and not SEED_MIN <= seed <= SEED_MAX:
                raise SamplingParamsError(name, f"must be a 64-bit integer in [{SEED_MIN}, {SEED_MAX}], got {seed}")
        if self.seed is not None and self.sampling_seed is not None and self.seed != self.sampling_seed:
            raise SamplingParamsError("sampling_seed", "differs from seed; give one of them")
        self._validate_missing_features()
        self._validate_stop_regex()
        for token_id in self.stop_token_ids or []:
            if not 0 <= token_id < vocab_size:
                raise SamplingParamsError("stop_token_ids", f"{token_id} is not a token id (vocab {vocab_size})")
        self._validate_logit_bias(vocab_size)
        self._validate_grammar()

    def normalize(self) -> SamplingParams:
        """A copy in the sampler's canonical form: `stop` and `stop_token_ids` are lists, a
        temperature of (about) 0 is greedy (`temperature=0, top_k=1`), a disabled top-k is
        `TOP_K_ALL`. Call after `validate`."""
        stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        greedy = self.temperature < _GREEDY_EPS
        return dataclasses.replace(
            self,
            stop=stop,
            stop_token_ids=list(self.stop_token_ids or []),
            stop_regex=[self.stop_regex] if isinstance(self.stop_regex, str) else list(self.stop_regex or []),
            seed=self.seed if self.seed is not None else self.sampling_seed,
            sampling_seed=None,
            temperature=0.0 if greedy else self.temperature,
            top_k=1 if greedy else TOP_K_ALL if self.top_k == -1 else self.top_k,
        )

    def _validate_missing_features(self) -> None:
        if self.beam_width is not None and self.beam_width != 1:
            raise SamplingParamsError("beam_width", "beam search is not supported by this server")
        if self.structural_tag is not None:
            raise SamplingParamsError("structural_tag", "structural tags are not supported by this server")
        if self.watermark is not None:
            raise SamplingParamsError("watermark", "watermarking is not supported by this server")

    def _validate_stop_regex(self) -> None:
        patterns = [self.stop_regex] if isinstance(self.stop_regex, str) else self.stop_regex or []
        if len(patterns) > MAX_STOP_REGEX_COUNT:
            raise SamplingParamsError("stop_regex", f"at most {MAX_STOP_REGEX_COUNT} patterns, got {len(patterns)}")
        for pattern in patterns:
            if len(pattern.encode()) > MAX_STOP_REGEX_BYTES:
                raise SamplingParamsError("stop_regex", f"a pattern is over {MAX_STOP_REGEX_BYTES} bytes")
            try:
                compiled_stop_regex(pattern)
            except ValueError as e:
                raise SamplingParamsError("stop_regex", str(e)) from None

    def _validate_logit_bias(self, vocab_size: int) -> None:
        for key, bias in (self.logit_bias or {}).items():
            try:
                token_id = int(key)
            except ValueError:
                raise SamplingParamsError("logit_bias", f"key {key!r} is not a token id") from None
            if not 0 <= token_id < vocab_size:
                raise SamplingParamsError("logit_bias", f"{token_id} is not a token id (vocab {vocab_size})")
            if not math.isfinite(bias):
                raise SamplingParamsError("logit_bias", f"bias of {key} must be finite, got {bias}")

    def _validate_grammar(self) -> None:
        given = [name for name in ("json_schema", "regex", "ebnf") if getattr(self, name) is not None]
        if len(given) > 1:
            raise SamplingParamsError(given[1], f"only one of json_schema, regex and ebnf may be set, got {given}")
        if self.json_schema is not None:
            try:
                json.loads(self.json_schema)
            except json.JSONDecodeError as e:
                raise SamplingParamsError("json_schema", f"not valid JSON: {e}") from None


_FIELD_TYPES = typing.get_type_hints(SamplingParams)
_MISMATCH = object()


def _accepts_none(hint: Any) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in typing.get_args(hint)


def _coerce(value: Any, hint: Any) -> Any:
    """`value` as an instance of the type hint `hint` (ints widen to float), or `_MISMATCH`.
    `Any` takes any JSON value."""
    if hint is Any:
        return value
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        for arm in typing.get_args(hint):
            coerced = _coerce(value, arm)
            if coerced is not _MISMATCH:
                return coerced
        return _MISMATCH
    if origin is list:
        if not isinstance(value, list):
            return _MISMATCH
        items = [_coerce(v, typing.get_args(hint)[0]) for v in value]
        return _MISMATCH if any(i is _MISMATCH for i in items) else items
    if origin is dict:
        if not isinstance(value, dict):
            return _MISMATCH
        key_hint, value_hint = typing.get_args(hint)
        pairs = [(_coerce(k, key_hint), _coerce(v, value_hint)) for k, v in value.items()]
        return _MISMATCH if any(k is _MISMATCH or v is _MISMATCH for k, v in pairs) else dict(pairs)
    if hint is type(None):
        return None if value is None else _MISMATCH
    if isinstance(value, bool):  # bool is an int subclass, but `true` is no token count
        return value if hint is bool else _MISMATCH
    if hint is float and isinstance(value, int):
        return float(value)
    return value if isinstance(value, hint) else _MISMATCH


def _type_name(hint: Any) -> str:
    return hint.__name__ if isinstance(hint, type) and not typing.get_args(hint) else str(hint)
