"""What every tensor-parallel rank does to its LoRA slots, as commands rank 0 broadcasts.

The scheduler's `LoraManager` (rank 0) decides; each decision that touches a model is a
`LoraCommand`, which the manager applies to its own `LoraReplica` and hands to its mirror (the
leader runner, which broadcasts it). A follower applies the same commands, in the same order, to
its own replica, so every rank's slots hold the same adapters. Each rank keeps only its shard of a
slot (`LoraLinear.write`); the adapter itself travels whole, once, when it is loaded.

Invariants: rank 0 and its followers run this one code path; nothing about slots is decided on a
follower. Each command that changes the model's tensors (attaching the layers, writing a slot)
bumps the model's `weights_version` (`ops.step.StepModel`), so a runner holding copies of the
weights reads them again before the next step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import nn

from sglang.runtime.lora.adapter import LoraAdapter
from sglang.runtime.lora.layers import LoraState, attach_lora, write_slot


@dataclass(frozen=True)
class AttachLora:
    """Wrap the model's targeted projections with `slots` slots of rank `rank`."""

    slots: int
    rank: int
    targets: frozenset[str]


@dataclass(frozen=True)
class LoadLora:
    """Keep `adapter` on the host as `uid` (slot writes name it by uid)."""

    uid: int
    adapter: LoraAdapter


@dataclass(frozen=True)
class WriteLoraSlot:
    """Fill `slot` with adapter `uid`, or clear it with None."""

    slot: int
    uid: int | None


@dataclass(frozen=True)
class UnloadLora:
    """Forget adapter `uid` (its slots were cleared first)."""

    uid: int


LoraCommand = AttachLora | LoadLora | WriteLoraSlot | UnloadLora
LoraMirror = Callable[[LoraCommand], None]
"""Where rank 0's commands go besides its own replica (the other ranks)."""


class LoraReplica:
    """One rank's LoRA slots and the adapters they may be filled from."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.state: LoraState | None = None
        self.adapters: dict[int, LoraAdapter] = {}

    def apply(self, command: LoraCommand) -> None:
        match command:
            case AttachLora(slots, rank, targets):
                self.state = attach_lora(self.model, slots, rank, targets)
                self.model.lora = self.state
                self.model.weights_version += 1
            case LoadLora(uid, adapter):
                self.adapters[uid] = adapter
            case WriteLoraSlot(slot, uid):
                write_slot(self.attached(), slot, None if uid is None else self.adapters[uid])
                self.model.weights_version += 1
            case UnloadLora(uid):
                del self.adapters[uid]
            case _:
                raise TypeError(f"not a LoRA command: {type(command).__name__}")

    def attached(self) -> LoraState:
        if self.state is None:
            raise RuntimeError("a LoRA slot was written before the model's LoRA layers were attached")
        return self.state
