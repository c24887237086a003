"""Control messages: operations the tokenizer manager asks the scheduler to run between two steps.

One frozen dataclass per message and one per reply; a message's class says which reply it gets
(`ControlMessage[R]`). They travel pickled over ZeroMQ inside the `ControlRequest` and
`ControlReply` envelopes, which carry the request id that pairs a reply with its waiter.

Invariants:
- Every `ControlRequest` gets exactly one `ControlReply` with its `request_id`.
- The scheduler dispatches on the message's type (runtime/scheduler/process.py `answer`); a type
  it has no handler for is answered with `ControlError`, never with another message's reply.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Generic, Literal, TypeVar, get_args

from sglang.runtime.observability.step_profiler import ProfileSettings

R = TypeVar("R")


@dataclass(frozen=True)
class ControlError:
    """The reply to a message the scheduler could not answer (an unknown type, a handler that raised)."""

    message: str


@dataclass(frozen=True)
class FlushResult:
    ok: bool
    reason: str | None = None
    """Why the cache was not flushed (None when `ok`)."""


@dataclass(frozen=True)
class SchedulerStatus:
    """The scheduler's live state and its running totals (what `/server_info`, `/get_load` and
    `/metrics` report). Totals only grow; `kv_tokens_in_use` counts cached tokens too."""

    num_running_requests: int
    num_waiting_requests: int
    num_request_tokens: int
    """The tokens of every request the server holds: what routers balance on (`/get_load`)."""
    kv_tokens_total: int
    kv_tokens_free: int
    kv_tokens_cached: int
    kv_tokens_evictable: int
    kv_tokens_in_use: int
    prompt_tokens: int
    generation_tokens: int
    cached_tokens: int
    retractions: int
    static_steps: int
    eager_steps: int
    static_step_fallbacks: int
    spec_verify_ct: int = 0
    """Speculative decoding: decode steps of requests, drafted tokens verified and accepted."""
    spec_draft_tokens: int = 0
    spec_accepted_tokens: int = 0
    verify_steps: int = 0
    """Model steps that verified drafts (a batch's step counts once)."""
    device_hit_tokens: int = 0
    """Of `cached_tokens`, those the device pool held when the request was admitted."""
    host_hit_tokens: int = 0
    """Of `cached_tokens`, those loaded from the host tier."""
    storage_hit_tokens: int = 0
    """Of `cached_tokens`, those loaded from the storage tier (the rest were in the device pool)."""
    host_tokens: int = 0
    """Tokens the host tier holds now."""
    host_tokens_evicted: int = 0
    """Tokens whose copies the host tier dropped to make room."""
    storage_blocks_written: int = 0
    storage_blocks_read: int = 0
    storage_blocks_rejected: int = 0
    """Stored blocks found corrupt, truncated or foreign: removed, their tokens recomputed."""
    storage_write_errors: int = 0
    kv_transfer_bytes_sent: int = 0
    """Prefill-decode disaggregation, prefill side: KV payload bytes sent, rooms sent, rooms
    published and not yet fetched."""
    kv_transfers_sent: int = 0
    kv_transfer_rooms_pending: int = 0
    kv_transfer_bytes_received: int = 0
    """Decode side: KV payload bytes received, transfers installed, transfers that failed."""
    kv_transfers_received: int = 0
    kv_transfers_failed: int = 0
    kv_bytes_per_token: int = 0
    """PD mode: the KV bytes of one token over all layers, as the attention backend's layout
    declares them (a transfer of n prompt tokens moves n times this)."""

    def to_json(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True)
class ConcatResult:
    """The scheduler's answer to `ConcatAndAppend`. `input_ids` is the sequence P + B_1 + ... +
    B_n; `cached_tokens` how many of its leading tokens are cached now (all of them when `ok`);
    `copied_tokens` how many KV entries this call wrote; `reason` why it was refused (None when `ok`)."""

    ok: bool
    input_ids: list[int]
    cached_tokens: int = 0
    copied_tokens: int = 0
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class LoraResult:
    """Upstream's answer to `/load_lora_adapter` and `/unload_lora_adapter`: whether it was done,
    why not, and the adapters loaded now (name to path)."""

    success: bool
    error_message: str | None
    loaded_adapters: dict[str, str]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ProfileResult:
    """Upstream's `ProfileReqOutput`: whether the profiler did it, and what it said (why not, or
    where the trace went)."""

    success: bool
    message: str


@dataclass(frozen=True)
class WeightsUpdated:
    """Upstream's `UpdateWeightFromDiskReqOutput`: whether the weights were replaced, and why not."""

    success: bool
    message: str


@dataclass(frozen=True)
class WeightsRead:
    """A checkpoint tensor's values (float lists, its first rows), or why there are none."""

    parameter: list[Any] | None
    error: str | None = None


@dataclass(frozen=True)
class ControlMessage(Generic[R]):
    """Base of every control message; `R` is the type of its reply (or `ControlError`)."""


@dataclass(frozen=True)
class FlushCache(ControlMessage[FlushResult]):
    """Empties the prefix cache; refused while requests run or wait."""


@dataclass(frozen=True)
class GetSchedulerStatus(ControlMessage[SchedulerStatus]):
    pass


@dataclass(frozen=True)
class ConcatAndAppend(ControlMessage[ConcatResult]):
    """Caches `prefix_ids + branch_ids[0] + ...` from the branches' cached KV
    (runtime/scheduler/kv_concat.py). `branch_ids[i]` are branch i's tokens after the prefix."""

    prefix_ids: tuple[int, ...]
    branch_ids: tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class LoadLoraAdapter(ControlMessage[LoraResult]):
    """Reads a PEFT folder and registers the adapter; all or nothing."""

    lora_name: str
    lora_path: str
    pinned: bool = False


@dataclass(frozen=True)
class UnloadLoraAdapter(ControlMessage[LoraResult]):
    """Forgets an adapter; refused while requests use it."""

    lora_name: str


@dataclass(frozen=True)
class StartProfile(ControlMessage[ProfileResult]):
    """Starts a torch profiler trace of the scheduler's steps (`runtime/observability/step_profiler.py`)."""

    settings: ProfileSettings


@dataclass(frozen=True)
class StopProfile(ControlMessage[ProfileResult]):
    """Ends the profile and writes its trace."""


@dataclass(frozen=True)
class UpdateWeightsFromDisk(ControlMessage[WeightsUpdated]):
    """Replaces the model's weights in place by those of `model_path` (the same architecture);
    refused while requests run or wait. `flush_cache`: empty the prefix cache after, whose KV
    the old weights computed."""

    model_path: str
    flush_cache: bool = True
    load_format: str | None = None
    """None or "auto": the checkpoint is read in its own format (a GGUF, safetensors), as at start."""

    def __post_init__(self) -> None:
        _check_load_format(self.load_format)


@dataclass(frozen=True)
class UpdateWeightsFromTensor(ControlMessage[WeightsUpdated]):
    """Copies `(checkpoint name, tensor)` pairs into the model's dense parameters in place;
    refused while requests run or wait. `flush_cache` as for `UpdateWeightsFromDisk`."""

    named_tensors: list[tuple[str, Any]]
    flush_cache: bool = True
    load_format: str | None = None
    """None or "auto": the tensors as given."""

    def __post_init__(self) -> None:
        _check_load_format(self.load_format)


def _check_load_format(load_format: str | None) -> None:
    """Upstream's other load formats (sharded states, remote sources, serialized buckets) are not served."""
    if load_format not in (None, "auto"):
        raise ValueError(f"load_format {load_format!r} is not supported: a checkpoint loads in its own format")


@dataclass(frozen=True)
class GetWeightsByName(ControlMessage[WeightsRead]):
    """Reads a checkpoint tensor of the running model by its Hugging Face name (rank 0's shard)."""

    name: str
    truncate_size: int = 100


@dataclass(frozen=True)
class SetLogLevel(ControlMessage[bool]):
    """Sets the scheduler process's root log level (`/configure_logging`). The reply is True."""

    level: str


PauseMode = Literal["abort", "retract", "in_place"]
"""Upstream's `/pause_generation` modes (what each does: `Scheduler.pause`)."""


@dataclass(frozen=True)
class PauseGeneration(ControlMessage[bool]):
    """Stops running steps (`Scheduler.pause`). The reply is True."""

    mode: PauseMode = "abort"

    def __post_init__(self) -> None:
        if self.mode not in get_args(PauseMode):
            raise ValueError(f"mode must be one of {list(get_args(PauseMode))}, got {self.mode!r}")


@dataclass(frozen=True)
class ContinueGeneration(ControlMessage[bool]):
    """Runs steps again; `empty_cache`: first return the device allocator's cached blocks to the
    device (upstream's `torch_empty_cache`). The reply is True."""

    empty_cache: bool = True


@dataclass(frozen=True)
class ControlRequest:
    request_id: str
    message: ControlMessage[Any]


@dataclass(frozen=True)
class ControlReply:
    request_id: str
    result: object
    """The reply type of the request's message, or `ControlError`."""
