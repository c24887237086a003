"""Typed messages between the tokenizer manager, the scheduler and the detokenizer.

They travel pickled over ZeroMQ. Direction: tokenizer manager -> scheduler (requests, aborts,
control), scheduler -> detokenizer (token ids), detokenizer -> tokenizer manager (text), and
scheduler -> tokenizer manager (control replies).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from sglang.runtime.sampling_params import SamplingParams


@dataclass(frozen=True)
class LogprobRequest:
    """What log-probabilities a request wants back (SGLang's native fields)."""

    return_logprob: bool = False
    logprob_start_len: int = -1
    """First prompt position whose logprob is returned; -1 means output tokens only."""
    top_logprobs_num: int = 0
    token_ids_logprob: tuple[int, ...] = ()
    return_entropy: bool = False
    """Not a logprob, but computed from the same distribution."""


@dataclass
class GenerateRequest:
    rid: str
    input_ids: list[int]
    params: SamplingParams
    logprobs: LogprobRequest = field(default_factory=LogprobRequest)
    stream: bool = False
    priority: int = 0
    arrival_time: float = field(default_factory=time.monotonic)


@dataclass(frozen=True)
class AbortRequest:
    rid: str
    message: str = "aborted by the client"


@dataclass(frozen=True)
class ControlRequest:
    """`kind` is `flush_cache`, `server_info` or `concat_and_append` (whose `args` are
    `prefix_ids` and `branch_ids`, see runtime/scheduler/kv_concat.py); the reply carries the
    same `request_id`."""

    kind: str
    request_id: str
    args: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ControlReply:
    request_id: str
    ok: bool
    payload: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class DecodeSpec:
    """How the detokenizer turns a request's tokens into text; sent with its first output."""

    skip_special_tokens: bool
    spaces_between_special_tokens: bool
    stop_strings: tuple[str, ...]
    trim_stop: bool
    stop_regexes: tuple[str, ...] = ()


@dataclass
class TokenUpdate:
    """New output of one request in one step. `meta` is set when something changed: always on
    the final update, and on every update of a streaming request."""

    rid: str
    new_token_ids: list[int]
    finish_reason: dict[str, Any] | None = None
    meta: dict[str, Any] | None = None
    decode_spec: DecodeSpec | None = None


@dataclass
class TokenBatch:
    updates: list[TokenUpdate]


@dataclass
class TextUpdate:
    rid: str
    text: str
    """The request's whole output text so far (stop strings trimmed once finished)."""
    output_ids: list[int]
    finish_reason: dict[str, Any] | None
    meta: dict[str, Any] | None


@dataclass
class TextBatch:
    updates: list[TextUpdate]
