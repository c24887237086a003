"""Where the tensor-parallel ranks run and how they meet (SGLang's flags).

`--tp-size N` ranks over `--nnodes` nodes, `N / nnodes` consecutive ranks per node; node
`--node-rank 0` holds rank 0 (the scheduler that serves HTTP). A rank's index on its node is its
local rank, and on an accelerator it takes the device of that index (`Platform.bind_local_rank`). The ranks meet at
`--dist-init-addr HOST:PORT` (rank 0 listens there), by default a free loopback port. A rank
joins the process group on its platform's distributed backend, and every collective it then
waits in fails after `--dist-timeout` seconds rather than hanging.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

import torch.distributed as dist

from sglang.platforms.base import Platform, PlatformError
from sglang.runtime.distributed.group import SINGLE, TPGroup, set_tp_group
from sglang.runtime.server_args import ServerArgs


@dataclass(frozen=True)
class RankPlacement:
    rank: int
    world_size: int
    init_method: str
    timeout_s: float
    local_rank: int = 0
    """The rank's index among its node's ranks: its device index."""

    @property
    def name(self) -> str:
        return f"tp-rank-{self.rank}"


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def node_placements(args: ServerArgs) -> list[RankPlacement]:
    """This node's ranks, in order; empty without tensor parallelism."""
    if args.tp_size == 1:
        return []
    address = args.dist_init_addr or f"127.0.0.1:{free_loopback_port()}"
    timeout = args.dist_timeout or args.watchdog_timeout
    per_node = args.tp_size // args.nnodes
    first = args.node_rank * per_node
    return [
        RankPlacement(r, args.tp_size, f"tcp://{address}", timeout, local_rank=r - first)
        for r in range(first, first + per_node)
    ]


def check_backend(platform: Platform, tp_size: int) -> None:
    """Fails with the reason when `platform` cannot run `tp_size` ranks."""
    backend = platform.distributed_backend
    if not dist.is_available():
        raise PlatformError(f"--tp-size {tp_size}: this torch build has no torch.distributed")
    if not backend or not dist.is_backend_available(backend):
        raise PlatformError(
            f"--tp-size {tp_size}: the {platform.name} platform's distributed backend "
            f"({backend or 'none declared'}) is not available in this torch build"
        )


def join(platform: Platform, placement: RankPlacement | None) -> TPGroup:
    """Takes this rank's device, joins the ranks' process group and makes it this process's
    `tp_group()`. The device comes first: the collective backend binds to the current device,
    and the KV pool is sized from this device's free memory."""
    if placement is None:
        return SINGLE
    check_backend(platform, placement.world_size)
    platform.bind_local_rank(placement.local_rank)
    comm = platform.init_distributed(placement.rank, placement.world_size, placement.init_method, placement.timeout_s)
    group = TPGroup(placement.rank, placement.world_size, comm)
    set_tp_group(group)
    return group
