"""Typed requests and workloads of the schedule fuzzer, and how each request is submitted.

A `Workload` is a set of requests submitted together, so the scheduler batches, chunks, evicts and
retracts them as it likes; a `RequestSpec` is one of them. Requests carry token ids (never text),
so a prompt means the same tokens on every target and to the oracle.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

TOP_LOGPROBS = 2
"""The oracle always asks for the top two logprobs of each output token: the near-tie check."""


@dataclass(frozen=True)
class RequestSpec:
    """One request. Invariants: `abort_after` is set only on streams (it is the number of chunks
    read before the client closes the stream); a stream has `n == 1` (the engine streams only
    single samples); `temperature == 0` means greedy, whose tokens the oracle checks."""

    prompt_ids: tuple[int, ...]
    max_new_tokens: int
    n: int = 1
    temperature: float = 0.0
    stop: tuple[str, ...] = ()
    stop_regex: str | None = None
    json_schema: str | None = None
    top_logprobs_num: int | None = None
    """None: no logprobs asked; else `return_logprob` with this many top logprobs per token."""
    stream: bool = False
    abort_after: int | None = None
    lora_path: str | None = None
    """The LoRA adapter the request runs with (targets that serve the fuzz adapters only)."""

    def __post_init__(self) -> None:
        if self.abort_after is not None and not self.stream:
            raise ValueError("abort_after needs stream=True")
        if self.stream and self.n != 1:
            raise ValueError("only single samples stream")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def sampling_params(self) -> dict[str, Any]:
        params: dict[str, Any] = {"max_new_tokens": self.max_new_tokens, "temperature": self.temperature, "n": self.n}
        if self.stop:
            params["stop"] = list(self.stop)
        if self.stop_regex is not None:
            params["stop_regex"] = self.stop_regex
        if self.json_schema is not None:
            params["json_schema"] = self.json_schema
        return params

    def generate_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of `Engine.generate` / `async_generate` for this request."""
        kwargs: dict[str, Any] = {"input_ids": list(self.prompt_ids), "sampling_params": self.sampling_params()}
        if self.top_logprobs_num is not None:
            kwargs.update(return_logprob=True, top_logprobs_num=self.top_logprobs_num)
        if self.lora_path is not None:
            kwargs["lora_path"] = self.lora_path
        return kwargs

    def oracle_request(self) -> RequestSpec:
        """What the oracle runs for one greedy sequence of this request: the same prompt, budget
        and stopping rules, one sample, no stream, with the top logprobs the tie check reads.
        Requests that differ only in how they are delivered share one oracle answer."""
        return replace(self, n=1, stream=False, abort_after=None, top_logprobs_num=TOP_LOGPROBS)

    def describe(self) -> str:
        """A short line for failure reports: the prompt's length instead of its ids."""
        fields = {k: v for k, v in vars(self).items() if k != "prompt_ids" and v not in (None, (), False)}
        return f"prompt[{len(self.prompt_ids)}] " + " ".join(f"{k}={v!r}" for k, v in fields.items())


@dataclass(frozen=True)
class Workload:
    """Requests submitted at once (each from its own task, so they batch together)."""

    requests: tuple[RequestSpec, ...]

    def sequences(self) -> int:
        return sum(r.n for r in self.requests)

    def describe(self) -> str:
        return "\n".join(f"  [{i}] {r.describe()}" for i, r in enumerate(self.requests))
