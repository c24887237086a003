"""The tensor-parallel group of this process: its rank, the group's size, its communicator.

Parallel layers read it when they are built (`tp_group()`), so the model code stays one
decoder: a rank's process sets its group once, before the model is built, and every layer
shards itself by it. A process that never sets one is a group of one, where every layer holds
the whole tensor and every collective is the identity.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from sglang.ops.collectives import Communicator, SingleProcessCommunicator


@dataclass(frozen=True)
class TPGroup:
    rank: int
    size: int
    comm: Communicator

    def agree_min(self, value: int) -> int:
        """The smallest of every rank's `value`, on every rank (each rank sizes its own memory;
        the KV pool must be the same size everywhere)."""
        if self.size == 1:
            return value
        return int(self.comm.all_gather(torch.tensor([value], dtype=torch.int64), dim=0).min())


SINGLE = TPGroup(0, 1, SingleProcessCommunicator())
_current: TPGroup = SINGLE


def tp_group() -> TPGroup:
    return _current


def set_tp_group(group: TPGroup) -> None:
    global _current
    _current = group


@contextlib.contextmanager
def using_tp_group(group: TPGroup) -> Iterator[TPGroup]:
    """`group` while the block runs (tests build models of several ranks in one process)."""
    saved = _current
    set_tp_group(group)
    try:
        yield group
    finally:
        set_tp_group(saved)
