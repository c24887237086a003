"""Running a function on every rank of a gloo group, each rank its own spawned process, bounded."""

from __future__ import annotations

import multiprocessing as mp
import time
from collections.abc import Callable
from typing import Any

import torch

from sglang.platforms.cpu.platform import CpuPlatform
from sglang.runtime.distributed.group import TPGroup, set_tp_group


def join_gloo(rank: int, world_size: int, rendezvous: str) -> TPGroup:
    """This process as `rank` of a gloo group met at the file `rendezvous`, and its `tp_group()`."""
    torch.set_num_threads(1)
    comm = CpuPlatform().init_distributed(rank, world_size, f"file://{rendezvous}", timeout_s=60)
    group = TPGroup(rank, world_size, comm)
    set_tp_group(group)
    return group


def run_ranks(target: Callable[..., None], args: tuple[Any, ...], world_size: int = 2, timeout_s: float = 240) -> None:
    """`target(rank, *args)` in `world_size` spawned processes; fails if any exits non-zero or
    they outlive `timeout_s` (then every one is killed: a hang fails the test, never the run)."""
    ctx = mp.get_context("spawn")
    processes = [ctx.Process(target=target, args=(rank, *args), daemon=True) for rank in range(world_size)]
    for p in processes:
        p.start()
    deadline = time.monotonic() + timeout_s
    for p in processes:
        p.join(max(0.0, deadline - time.monotonic()))
    hung = [p for p in processes if p.is_alive()]
    for p in hung:
        p.kill()
        p.join(5)
    assert not hung, f"{len(hung)} rank(s) still running after {timeout_s:.0f} s"
    assert [p.exitcode for p in processes] == [0] * world_size, [p.exitcode for p in processes]
