"""Per-request stage stamps: where a request's time to first token goes, process by process.

With `SGLANG_REQUEST_STAMPS=<file>` set, every process of the server (HTTP front, scheduler,
detokenizer) appends one JSON line per stamp to `<file>`: `{"rid", "stage", "ns", "pid"}`.
`ns` is `time.monotonic_ns()`, which on Linux is one clock for every process of the machine, so
stamps of different processes subtract. Each stage is stamped once per request, on the path of
its first output only (prefill to first streamed byte), in `STAGES` order;
`benchmarks/bench_ttft.py` turns the file into per-stage medians.

Unset (the default), `STAMPS` is None and every call site is one `is not None` test: nothing
else runs, nothing is allocated.

Invariant: a line is written with one `write` to a file opened for appending and is shorter
than the pipe buffer, so lines of different processes never interleave.
"""

from __future__ import annotations

import contextvars
import json
import os
import time
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from sglang.runtime.processes.messages import TokenUpdate

ENV = "SGLANG_REQUEST_STAMPS"

STAGES: tuple[str, ...] = (
    "http_received",  # the ASGI app is called with the request (headers read)
    "generate_called",  # the route parsed the body and called the tokenizer manager
    "tokenized",  # prompt tokenized and validated
    "sending_to_scheduler",  # about to be pickled and pushed on the scheduler's socket
    "scheduler_received",  # unpickled in the scheduler's loop
    "forward_started",  # admitted and batched; the model call begins
    "forward_ended",  # logits ready
    "sampled",  # next token chosen
    "step_ended",  # request state advanced, its update made
    "sending_to_detokenizer",  # the step's token batch about to be pushed
    "detokenizer_received",
    "sending_to_manager",  # text made, about to be pushed back to the HTTP process
    "manager_received",  # the HTTP process's receive task has the text update
    "output_built",  # the output dict handed to the route
    "first_byte_sent",  # the first body bytes handed to the server (uvicorn)
)


class StampWriter:
    """Appends stamps to one file; one per process."""

    def __init__(self, path: str) -> None:
        self.pid = os.getpid()
        self.file: IO[str] = open(path, "a", buffering=1)  # noqa: SIM115 (lives as long as the process)

    def stamp(self, rid: str, stage: str, ns: int | None = None) -> None:
        ns = time.monotonic_ns() if ns is None else ns
        self.file.write(json.dumps({"rid": rid, "stage": stage, "ns": ns, "pid": self.pid}) + "\n")


def _from_environment() -> StampWriter | None:
    path = os.environ.get(ENV)
    return StampWriter(path) if path else None


STAMPS: StampWriter | None = _from_environment()
"""This process's writer, or None when stamps are off (the environment is read at import, so a
spawned child decides for itself from the environment it inherits)."""


@dataclass
class HttpClock:
    """One HTTP request's arrival time and the engine request ids it started; the ASGI frame
    puts it in `HTTP_CLOCK` and stamps `first_byte_sent` for its `rids`."""

    received_ns: int
    rids: list[str] = field(default_factory=list)
    first_byte_sent: bool = False

    def add(self, writer: StampWriter, rid: str) -> None:
        """Ties `rid` to this HTTP request: its `http_received` is the request's arrival."""
        self.rids.append(rid)
        writer.stamp(rid, "http_received", self.received_ns)

    def body_sent(self, writer: StampWriter) -> None:
        if self.first_byte_sent:
            return
        self.first_byte_sent = True
        now = time.monotonic_ns()
        for rid in self.rids:
            writer.stamp(rid, "first_byte_sent", now)


HTTP_CLOCK: contextvars.ContextVar[HttpClock | None] = contextvars.ContextVar("sglang_http_clock", default=None)
"""The current HTTP request's clock (set only when stamps are on); tasks the handler starts
inherit it, so the tokenizer manager finds it however deep the route's code runs."""


def stamp_generate_called(writer: StampWriter, rid: str) -> None:
    """Stamps the request's arrival (from its HTTP clock, when it came over HTTP) and now."""
    clock = HTTP_CLOCK.get()
    if clock is not None:
        clock.add(writer, rid)
    writer.stamp(rid, "generate_called")


@dataclass
class StepTimes:
    """When one scheduler step's model call began and ended and its tokens were sampled (0:
    the step did not get there)."""

    writer: StampWriter
    forward_started: int = 0
    forward_ended: int = 0
    sampled: int = 0

    def stamp_first_outputs(self, updates: list[TokenUpdate]) -> None:
        """Stamps the step's stages for each request whose first update this is (the update
        that carries its decode spec)."""
        ended = time.monotonic_ns()
        for update in updates:
            if update.decode_spec is None or not self.sampled:  # a failed step stamps nothing
                continue
            for stage, ns in (
                ("forward_started", self.forward_started),
                ("forward_ended", self.forward_ended),
                ("sampled", self.sampled),
                ("step_ended", ended),
            ):
                self.writer.stamp(update.rid, stage, ns)


def stamp_first_updates(writer: StampWriter, updates: list[TokenUpdate], stage: str) -> None:
    """Stamps `stage` now for each request among `updates` whose first update this is."""
    now = time.monotonic_ns()
    for update in updates:
        if update.decode_spec is not None:
            writer.stamp(update.rid, stage, now)
