"""Rank 0's model runner under tensor parallelism, and the loop the other ranks follow.

The scheduler runs once, on rank 0: every decision (admission, batches, KV slots, sampling) is
made there, so ranks cannot diverge. Each call that touches the model or the KV cache is first
broadcast to the other ranks as a `Command`, then run locally; the followers replay the same
calls in the same order on their shards, so every collective inside the model meets its peers.
Only rank 0's logits are used (each rank gathers the same full logits; rank 0 alone samples).

While the scheduler idles, rank 0 broadcasts a heartbeat at least every `HEARTBEAT_S`: a follower
therefore never waits longer than a step plus that for its next command (well inside the
collective timeout), and a dead peer is noticed within that time by the broadcast failing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch

from sglang.ops.collectives import Communicator
from sglang.ops.step import StepInputs
from sglang.runtime.model_runner import ModelRunner

logger = logging.getLogger(__name__)

HEARTBEAT_S = 1.0


@dataclass(frozen=True)
class Command:
    kind: str
    """`forward`, `copy_kv`, `heartbeat` or `stop`."""
    args: tuple[Any, ...] = ()


class LeaderRunner:
    """A `ModelRunner` for the scheduler whose model calls every rank makes together."""

    def __init__(self, runner: ModelRunner, comm: Communicator) -> None:
        self.runner = runner
        self.comm = comm
        self.model = runner.model
        self.platform = runner.platform
        self.num_slots = runner.num_slots
        self.step_stats = runner.step_stats

    def _send(self, command: Command) -> None:
        self.comm.broadcast_object(command, src=0)

    def forward(self, step: StepInputs) -> torch.Tensor:
        self._send(Command("forward", (step,)))
        return self.runner.forward(step)

    def copy_kv(self, *args: Any) -> None:
        self._send(Command("copy_kv", args))
        self.runner.copy_kv(*args)

    def kv_copy_unsupported(self) -> str | None:
        # Every rank has the same layout for its share of the KV heads, so rank 0's answer holds for all.
        return self.runner.kv_copy_unsupported()

    def heartbeat(self) -> None:
        self._send(Command("heartbeat"))

    def stop(self) -> None:
        self._send(Command("stop"))


def follow(runner: ModelRunner, comm: Communicator) -> None:
    """A follower's loop: replays rank 0's commands until `stop`. A broadcast that fails (rank 0
    died, or timed out) raises, which ends the follower's process."""
    calls = {"forward": runner.forward, "copy_kv": runner.copy_kv, "heartbeat": lambda: None}
    while True:
        command: Command = comm.broadcast_object(None, src=0)
        if command.kind == "stop":
            return
        calls[command.kind](*command.args)
