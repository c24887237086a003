"""`TorchDistributedCommunicator` over two real processes on gloo (the cpu platform's backend)."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from sglang.ops.collectives import TorchDistributedCommunicator
from sglang.platforms.cpu.platform import CpuPlatform

WORLD_SIZE = 2


def _worker(rank: int, rendezvous: str) -> None:
    """Runs in a spawned process; an assertion error here fails the spawn in the parent."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=WORLD_SIZE)
    try:
        comm = CpuPlatform().communicator()
        assert isinstance(comm, TorchDistributedCommunicator)
        assert (comm.rank, comm.world_size) == (rank, WORLD_SIZE)

        reduced = comm.all_reduce(torch.full((3,), float(rank + 1)))
        assert torch.equal(reduced, torch.full((3,), 3.0))

        mine = torch.arange(4.0).reshape(2, 2) + 10 * rank
        assert torch.equal(comm.all_gather(mine, dim=-1), torch.cat([mine - 10 * rank, mine + 10 * (1 - rank)], -1))
        assert comm.all_gather(mine, dim=0).shape == (4, 2)

        payload = {"from": rank, "tokens": [1, 2, 3]} if rank == 0 else None
        assert comm.broadcast_object(payload, src=0) == {"from": 0, "tokens": [1, 2, 3]}
    finally:
        dist.destroy_process_group()


def test_all_reduce_all_gather_broadcast_over_two_processes(tmp_path: Path) -> None:
    mp.spawn(_worker, args=(str(tmp_path / "rendezvous"),), nprocs=WORLD_SIZE, join=True)


def test_single_process_communicator_is_identity() -> None:
    comm = CpuPlatform().communicator()
    x = torch.randn(2, 3)
    assert comm.world_size == 1
    assert comm.all_reduce(x) is x and comm.all_gather(x) is x
    assert comm.broadcast_object({"a": 1}) == {"a": 1}
