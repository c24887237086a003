"""Collectives between the ranks of one model (tensor parallelism), behind one interface.

Each platform names the torch.distributed backend it uses (gloo, nccl, ...); a single-process
run uses `SingleProcessCommunicator`, whose operations are the identity.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import torch
import torch.distributed as dist


class Communicator(ABC):
    rank: int
    world_size: int

    @abstractmethod
    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """Sum over ranks; returns the reduced tensor (may be `x` itself)."""

    @abstractmethod
    def all_gather(self, x: torch.Tensor, dim: int = -1) -> torch.Tensor:
        """Concatenation of every rank's `x` along `dim`, in rank order."""

    @abstractmethod
    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        """`obj` as rank `src` holds it, on every rank."""


class SingleProcessCommunicator(Communicator):
    rank = 0
    world_size = 1

    def all_reduce(self, x):
        return x

    def all_gather(self, x, dim=-1):
        return x

    def broadcast_object(self, obj, src=0):
        return obj


class TorchDistributedCommunicator(Communicator):
    """Collectives over an initialized `torch.distributed` process group."""

    def __init__(self, group: dist.ProcessGroup | None = None) -> None:
        if not dist.is_initialized():
            raise RuntimeError("torch.distributed is not initialized; call init_process_group first")
        self.group = group
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)

    def all_reduce(self, x):
        dist.all_reduce(x, group=self.group)
        return x

    def all_gather(self, x, dim=-1):
        parts = [torch.empty_like(x) for _ in range(self.world_size)]
        dist.all_gather(parts, x.contiguous(), group=self.group)
        return torch.cat(parts, dim=dim)

    def broadcast_object(self, obj, src=0):
        box = [obj]
        dist.broadcast_object_list(box, src=src, group=self.group)
        return box[0]
