"""Rank 0's model runner under tensor parallelism, and the loop the other ranks follow.

The scheduler runs once, on rank 0: every decision (admission, batches, KV slots, sampling) is
made there, so ranks cannot diverge. Each call that touches the model or the KV cache is first
broadcast to the other ranks as a `Command` (one dataclass per kind of call), then run locally;
the followers replay the same calls in the same order on their shards, so every collective
inside the model meets its peers. The LoRA manager's slot changes travel the same way
(`runtime.lora.replica`), so every rank's adapter slots hold the same adapters, and so do the
hierarchical cache's KV moves (`runtime.memory.tier_commands`): each rank keeps its shard in its
own lower tiers. Only rank 0's
logits are used (each rank gathers the same full logits; rank 0 alone samples).

While the scheduler idles, rank 0 broadcasts a heartbeat at least every `HEARTBEAT_S`: a follower
therefore never waits longer than a step plus that for its next command (well inside the
collective timeout), and a dead peer is noticed within that time by the broadcast failing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from sglang.ops.collectives import Communicator
from sglang.ops.step import StepInputs
from sglang.runtime.execution.model_runner import ModelRunner
from sglang.runtime.loader.live_weights import WeightUpdateError
from sglang.runtime.lora.replica import AttachLora, LoadLora, LoraCommand, LoraReplica, UnloadLora, WriteLoraSlot
from sglang.runtime.memory.tier_commands import TierCommand
from sglang.runtime.memory.tier_replica import TierReplica
from sglang.runtime.server_args import ServerArgs

logger = logging.getLogger(__name__)

HEARTBEAT_S = 1.0


@dataclass(frozen=True)
class Forward:
    """Run the model on `step`."""

    step: StepInputs


@dataclass(frozen=True)
class CopyKv:
    """`ModelRunner.copy_kv` with these arguments (runtime/scheduler/kv_concat.py)."""

    src_slots: torch.Tensor
    dst_slots: torch.Tensor
    src_positions: torch.Tensor
    position_delta: int


@dataclass(frozen=True)
class ReloadWeights:
    """`ModelRunner.reload_weights` from `model_path`, each rank reading its shard."""

    args: ServerArgs
    model_path: str


@dataclass(frozen=True)
class WriteWeights:
    """`ModelRunner.write_weights` with these tensors, each rank keeping its slice."""

    named_tensors: list[tuple[str, torch.Tensor]]


@dataclass(frozen=True)
class Heartbeat:
    """Rank 0 is alive and idle."""


@dataclass(frozen=True)
class Stop:
    """The followers' loop ends."""


Command = Forward | CopyKv | ReloadWeights | WriteWeights | LoraCommand | TierCommand | Heartbeat | Stop


class LeaderRunner:
    """A `ModelRunner` for the scheduler whose model calls every rank makes together."""

    def __init__(self, runner: ModelRunner, comm: Communicator) -> None:
        self.runner = runner
        self.comm = comm
        self.model = runner.model
        self.platform = runner.platform
        self.num_slots = runner.num_slots
        self.window_pool = runner.window_pool
        self.step_stats = runner.step_stats
        self.attn_backend = runner.attn_backend

    @property
    def kv_buffers(self) -> list[torch.Tensor]:
        """Rank 0's KV buffers (its shard), for its own tiers; the list itself, so a functional
        device's replaced buffers land in the runner's."""
        return self.runner.kv_buffers

    def _send(self, command: Command) -> None:
        self.comm.broadcast_object(command, src=0)

    def forward(self, step: StepInputs) -> torch.Tensor:
        self._send(Forward(step))
        return self.runner.forward(step)

    def copy_kv(
        self, src_slots: torch.Tensor, dst_slots: torch.Tensor, src_positions: torch.Tensor, position_delta: int
    ) -> None:
        self._send(CopyKv(src_slots, dst_slots, src_positions, position_delta))
        self.runner.copy_kv(src_slots, dst_slots, src_positions, position_delta)

    def reload_weights(self, args: ServerArgs, model_path: str) -> None:
        self._send(ReloadWeights(args, model_path))
        self.runner.reload_weights(args, model_path)

    def write_weights(self, named_tensors: list[tuple[str, torch.Tensor]]) -> None:
        self._send(WriteWeights(named_tensors))
        self.runner.write_weights(named_tensors)

    def kv_copy_unsupported(self) -> str | None:
        # Every rank has the same layout for its share of the KV heads, so rank 0's answer holds for all.
        return self.runner.kv_copy_unsupported()

    def lora_command(self, command: LoraCommand) -> None:
        """The LoRA manager's mirror: every rank changes its LoRA slots as rank 0 does."""
        self._send(command)

    def tier_command(self, command: TierCommand) -> None:
        """The hierarchical cache's mirror: every rank moves its shard of the KV as rank 0 does."""
        self._send(command)

    def heartbeat(self) -> None:
        self._send(Heartbeat())

    def stop(self) -> None:
        self._send(Stop())


class Follower:
    """A follower's state besides its runner (its LoRA slots, its lower KV tiers) and what it does
    with each of rank 0's commands."""

    def __init__(self, runner: ModelRunner) -> None:
        self.runner = runner
        self.lora = LoraReplica(runner.model)
        self.tiers = TierReplica(runner)

    def apply(self, command: Command) -> bool:
        """Replays `command`; False once it is `Stop`. A command of a type this code does not
        know raises (rank 0 and its followers run different code)."""
        match command:
            case Forward(step):
                self.runner.forward(step)
            case CopyKv(src_slots, dst_slots, src_positions, position_delta):
                self.runner.copy_kv(src_slots, dst_slots, src_positions, position_delta)
            case ReloadWeights() | WriteWeights():
                try:
                    if isinstance(command, ReloadWeights):
                        self.runner.reload_weights(command.args, command.model_path)
                    else:
                        self.runner.write_weights(command.named_tensors)
                except WeightUpdateError as e:  # rank 0 checks the same and answers the caller
                    logger.error("weights not updated: %s", e)
            case AttachLora() | LoadLora() | WriteLoraSlot() | UnloadLora():
                self.lora.apply(command)
            case _ if isinstance(command, TierCommand):
                self.tiers.apply(command)
            case Heartbeat():
                pass
            case Stop():
                return False
            case _:
                raise TypeError(f"unknown command from rank 0: {type(command).__name__}")
        return True


def follow(runner: ModelRunner, comm: Communicator) -> None:
    """A follower's loop: replays rank 0's commands until `Stop`. A broadcast that fails (rank 0
    died, or timed out) raises, which ends the follower's process."""
    follower = Follower(runner)
    try:
        while follower.apply(comm.broadcast_object(None, src=0)):
            pass
    finally:  # rank 0 gone or stopping: what this rank queued for storage is written first
        follower.tiers.close()
