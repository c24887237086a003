"""The hierarchical cache's tensor-parallel commands, in-process: rank 0's scheduler behind a real
`LeaderRunner` whose broadcasts a real `Follower` (rank 1 of 2, its own runner and KV buffers)
applies at once. Both ranks hold the whole model here, so after every KV move (a backup to the
host tier and to storage, a load from storage on a restarted pair, a load from the host tier)
rank 1's pool must hold exactly rank 0's KV; rank 1 stores under its own identity, so its blocks
are in a folder of its own, and every prefetch it started is ended.

The same with two processes and real shards is tests/distributed/test_tp_hicache.py (slow)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from sglang.ops.collectives import SingleProcessCommunicator
from sglang.runtime.distributed.group import TPGroup, using_tp_group
from sglang.runtime.distributed.leader import Follower, LeaderRunner
from sglang.runtime.execution.model_runner import ModelRunner
from sglang.runtime.memory.token_allocator import PagedTokenAllocator
from sglang.runtime.scheduler.scheduler import Scheduler

from .runtime_harness import Runtime, corpus_ids, make_request

BLOCK = 16


class InlineRankOne(SingleProcessCommunicator):
    """Rank 0's side of a group of two whose rank 1 is `follower`, in this process: a broadcast
    is applied by rank 1 at once; rank 1's all-gathers meet a rank 0 that holds what it holds."""

    def __init__(self, follower: Follower) -> None:
        self.follower = follower

    def broadcast_object(self, obj: object, src: int = 0) -> object:
        with using_tp_group(TPGroup(1, 2, self)):
            self.follower.apply(obj)
        return obj

    def all_gather(self, tensor: torch.Tensor, dim: int = 0) -> torch.Tensor:
        return torch.cat([tensor, tensor], dim=dim)


def twin(rt: Runtime, folder: Path) -> tuple[Scheduler, ModelRunner, Follower]:
    """A scheduler on rank 0's runner, with rank 1 following it."""
    base = rt.scheduler
    extra = json.dumps({"storage_dir": str(folder), "block_tokens": BLOCK})
    args = base.args.replace(
        max_total_tokens=1024,
        enable_hierarchical_cache=True,
        hicache_ratio=1.0,
        hicache_storage_backend="file",
        hicache_storage_backend_extra_config=extra,
        hicache_storage_prefetch_policy="wait_complete",
    )
    allocator = PagedTokenAllocator(1024 // args.page_size + 1, args.page_size)
    model, platform = base.runner.model, base.runner.platform
    follower = Follower(ModelRunner(model, platform, allocator.num_slots))
    leader = LeaderRunner(ModelRunner(model, platform, allocator.num_slots), InlineRankOne(follower))
    scheduler = Scheduler(
        leader,
        allocator,
        args,
        base.tail_text,
        base.eos_token_ids,
        base.context_length,
        base.grammar,
        tier_mirror=leader.tier_command,
    )
    return scheduler, leader.runner, follower


def assert_same_kv(scheduler: Scheduler, rank0: ModelRunner, follower: Follower, prompt: list[int]) -> None:
    slots = scheduler.cache.match_prefix(prompt).slots
    assert slots.numel() >= len(prompt) - 1
    for mine, theirs in zip(rank0.kv_buffers, follower.runner.kv_buffers):
        axis = scheduler.hicache.storage.kv.axis
        assert torch.equal(mine.index_select(axis, slots), theirs.index_select(axis, slots))


def run(rt: Runtime, scheduler: Scheduler, prompt: list[int]):
    request = make_request(prompt, max_new_tokens=3)
    return rt.run_on(scheduler, [request])[request.rid]


def test_every_rank_follows_backups_and_loads_of_every_tier(rt: Runtime, tmp_path: Path):
    prompt = corpus_ids(rt.tokenizer, 5 * BLOCK + 7, offset=3)
    first, rank0, follower = twin(rt, tmp_path)
    cold = run(rt, first, prompt)
    assert_same_kv(first, rank0, follower, prompt)
    assert first.hicache.flush(10) and follower.tiers.tiers.storage.io.flush(10)
    folders = sorted(tmp_path.iterdir())
    assert len(folders) == 2  # rank 0's (the model's identity at tp=1 here) and rank 1's own
    assert len(list(folders[0].rglob("*.kv"))) == len(list(folders[1].rglob("*.kv"))) >= 5

    second, rank0, follower = twin(rt, tmp_path)  # a restarted pair on the same folders
    warm = run(rt, second, prompt)
    assert warm.meta["cached_tokens_details"]["storage"] == 5 * BLOCK
    assert warm.output_ids == cold.output_ids
    assert_same_kv(second, rank0, follower, prompt)
    assert not follower.tiers.jobs  # every prefetch rank 1 started was ended

    assert second.flush_cache()  # the device tier empties: the prompt comes from the host tier
    again = run(rt, second, prompt)
    assert again.meta["cached_tokens_details"]["host"] >= 5 * BLOCK
    assert again.output_ids == cold.output_ids
    assert_same_kv(second, rank0, follower, prompt)
