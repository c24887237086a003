"""Typed messages between the tokenizer manager, the scheduler and the detokenizer.

They travel pickled over ZeroMQ. Direction: tokenizer manager -> scheduler (requests, aborts,
control), scheduler -> detokenizer (token ids), detokenizer -> tokenizer manager (text), and
scheduler -> tokenizer manager (control replies, whose messages are in runtime/processes/control.py), and
over a pipe at start-up, each rank's process -> the parent (`ReadyReport` or `StartupFailure`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from sglang.runtime.disaggregation.messages import Bootstrap
from sglang.runtime.observability.tracing import TraceCarrier
from sglang.runtime.requests.finish_reason import FinishReason
from sglang.runtime.requests.sampling_params import SamplingParams


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
    lora_path: str | None = None
    """The LoRA adapter (by name) the request runs with; None: the base model."""
    trace: TraceCarrier | None = None
    """The request's root span when tracing is on (`--enable-trace`); None otherwise."""
    bootstrap: Bootstrap | None = None
    """Prefill-decode disaggregation: the prefill server and room of this request."""


@dataclass(frozen=True)
class AbortRequest:
    rid: str
    message: str = "aborted by the client"


@dataclass(frozen=True)
class DecodeSpec:
    """How the detokenizer turns a request's tokens into text; sent with its first output."""

    skip_special_tokens: bool
    spaces_between_special_tokens: bool
    stop_strings: tuple[str, ...]
    trim_stop: bool
    stop_regexes: tuple[str, ...] = ()


@dataclass(frozen=True)
class LogprobDelta:
    """The log-probabilities a request recorded since its previous update, in SGLang's
    `(logprob, token_id)` pairs: every entry is sent exactly once, so the receiver's running
    lists are the concatenation of the deltas (streaming costs linear, not quadratic, time)."""

    input_token: list[tuple[float | None, int]]
    input_top: list[list[tuple[float, int]] | None]
    input_ids_logprob: list[list[tuple[float, int]] | None]
    output_token: list[tuple[float, int]]
    output_top: list[list[tuple[float, int]]]
    output_ids_logprob: list[list[tuple[float, int]]]
    output_entropy: list[float]


@dataclass(frozen=True)
class RequestMeta:
    """What the scheduler knows of a request at one update; the tokenizer manager turns it into
    SGLang's `meta_info`. Latencies are seconds from arrival: `ttft` to the first token (None
    before it), `e2e_latency` to this update, `itl` the mean gap between output tokens (None
    before the second)."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    e2e_latency: float
    ttft: float | None
    itl: float | None
    logprobs: LogprobDelta
    spec_verify_ct: int = 0
    """Speculative decoding: decode steps the request took, drafted tokens verified and accepted."""
    spec_draft_tokens: int = 0
    spec_accepted_tokens: int = 0
    queue_time: float | None = None
    """Seconds from arrival to the request's first admission (None while it waits)."""
    cached_tokens_details: dict[str, int | str] | None = None
    """`cached_tokens` per cache tier: device, host, storage (None without the hierarchical cache)."""
    retractions: int = 0
    """Times the request was retracted (KV full, or a retracting pause) and recomputed."""


@dataclass
class TokenUpdate:
    """New output of one request in one step. `meta` is set when something changed: always on
    the final update, and on every update of a streaming request."""

    rid: str
    new_token_ids: list[int]
    finish_reason: FinishReason | None = None
    meta: RequestMeta | None = None
    decode_spec: DecodeSpec | None = None
    trace: TraceCarrier | None = None
    """The request's `GenerateRequest.trace`, on every update (the detokenizer times them)."""


@dataclass
class TokenBatch:
    updates: list[TokenUpdate]


@dataclass
class TextUpdate:
    rid: str
    text: str
    """The request's whole output text so far (stop strings trimmed once finished)."""
    output_ids: list[int]
    finish_reason: FinishReason | None
    meta: RequestMeta | None


@dataclass
class TextBatch:
    updates: list[TextUpdate]


@dataclass(frozen=True)
class ReadyInfo:
    """What the parent learns once the model is loaded."""

    model_path: str
    tokenizer_path: str
    chat_template: str | None
    architectures: tuple[str, ...]
    model_type: str | None
    context_length: int
    vocab_size: int
    max_total_tokens: int
    device: str
    dtype: str
    eos_token_ids: tuple[int, ...]
    bos_token: str | None
    eos_token: str | None
    op_table: dict[str, object]
    """The chosen kernel of every op and why each other candidate lost (`OpTable.as_dict`)."""
    lora_enabled: bool = False
    lora_adapters: dict[str, str] = field(default_factory=dict)
    """The adapters loaded at startup, name to path."""
    disaggregation_mode: str = "null"

    def model_info(self) -> dict[str, object]:
        """SGLang's `/get_model_info` answer (`architecture` is ours, beside upstream's list)."""
        return {
            "model_path": self.model_path,
            "tokenizer_path": self.tokenizer_path,
            "is_generation": True,
            "architectures": list(self.architectures),
            "architecture": self.architectures[0] if self.architectures else None,
            "model_type": self.model_type,
            "chat_template": self.chat_template,
            "context_length": self.context_length,
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
            "has_image_understanding": False,
        }


@dataclass(frozen=True)
class ReadyReport:
    """A rank's process loaded its shard and serves; rank 0 (the scheduler) sends its `info`."""

    info: ReadyInfo | None = None


@dataclass(frozen=True)
class StartupFailure:
    """A rank's process could not start: `message` names the error, `traceback` shows where."""

    message: str
    traceback: str
