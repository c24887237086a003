"""The storage tier's prefetch without a model: all jobs together hold at most the pool's size in
blocks, a finished job gives its room back, jobs for one prefix share its blocks, and each
`--hicache-storage-prefetch-policy` value admits a waiting request when upstream's does (reads
held back by a gate on the store); a back-up only starts the device read, which the writer
thread waits for."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import torch

from sglang.platforms.device_runtime import DeviceRuntime, PendingRead
from sglang.runtime.memory.hicache_setup import HiCacheConfig
from sglang.runtime.memory.kv_pages import KVPageIO
from sglang.runtime.memory.page_store import FilePageStore
from sglang.runtime.memory.storage_io import StorageIO
from sglang.runtime.memory.storage_tier import StorageTier

BLOCK = 4
SHAPE = (1, 2, BLOCK, 1, 2)
TOKENS = list(range(6 * BLOCK))


def stored_tier(folder: Path, max_blocks: int, policy: str = "wait_complete", timeout: float = 1.0) -> StorageTier:
    """A storage tier whose folder holds the six blocks of `TOKENS` (block i's KV is all i)."""
    store = FilePageStore(folder, "model")
    config = HiCacheConfig(folder, BLOCK, "write_through", policy, timeout, 0.0)
    tier = StorageTier(config, StorageIO(store, torch.float32, SHAPE, max_blocks), kv=None, model_id="model")
    for i, ref in enumerate(tier.refs(TOKENS)):
        assert store.save(ref.key, ref.parent, ref.tokens, torch.full(SHAPE, float(i)))
    return tier


def gate(store: FilePageStore) -> threading.Event:
    """Holds every read of `store` until the event is set."""
    opened, load = threading.Event(), store.load

    def held(*args: object) -> torch.Tensor | None:
        assert opened.wait(30)
        return load(*args)

    store.load = held
    return opened


def test_prefetched_blocks_are_bounded_by_the_pool_and_given_back(tmp_path: Path):
    tier = stored_tier(tmp_path, max_blocks=4)
    first = tier.prefetch(TOKENS[: 3 * BLOCK], 0)
    assert first.done.wait(10)
    second = tier.prefetch(TOKENS, 3 * BLOCK)  # blocks 3, 4, 5: room for one
    assert second.done.wait(10)
    assert len(first.blocks) == 3 and len(second.blocks) == 1 and tier.io.held_blocks == 4
    blocks = tier.take(TOKENS[: 3 * BLOCK], 0, first)
    assert [int(b.flatten()[0]) for b in blocks] == [0, 1, 2] and tier.io.held_blocks == 1
    third = tier.prefetch(TOKENS, 4 * BLOCK)
    assert third.done.wait(10) and len(third.blocks) == 2 and tier.io.held_blocks == 3
    # A partial first block: what follows 13 cached tokens starts inside block 3.
    assert [int(b.flatten()[0]) for b in tier.take(TOKENS, 13, second)] == [3]
    tier.io.close(1)


def test_jobs_for_one_prefix_read_each_block_once_and_share_its_room(tmp_path: Path):
    tier = stored_tier(tmp_path, max_blocks=6)
    jobs = [tier.prefetch(TOKENS, 0) for _ in range(3)]  # three requests sharing one stored prompt
    assert all(job.done.wait(10) for job in jobs)
    assert all(len(job.blocks) == 6 for job in jobs)
    assert tier.io.store.stats.blocks_read == 6 and tier.io.held_blocks == 6
    tier.take(TOKENS, 0, jobs[0])
    assert tier.io.held_blocks == 6  # the other two still hold them
    later = tier.prefetch(TOKENS, 0)
    assert later.done.wait(10) and len(later.blocks) == 6 and tier.io.store.stats.blocks_read == 6
    for job in (*jobs[1:], later):
        assert [int(b.flatten()[0]) for b in tier.take(TOKENS, 0, job)] == list(range(6))
    assert tier.io.held_blocks == 0
    tier.io.close(1)


def test_best_effort_admits_at_once(tmp_path: Path):
    tier = stored_tier(tmp_path, max_blocks=8, policy="best_effort")
    opened = gate(tier.io.store)
    job = tier.prefetch(TOKENS, 0)
    assert tier.ready(job) and not job.done.is_set()
    assert tier.take(TOKENS, 0, job) == []  # nothing landed yet: the request recomputes
    opened.set()
    assert job.done.wait(10) and tier.io.held_blocks == 0  # a taken job's late reads are dropped
    tier.io.close(1)


def test_wait_complete_admits_once_every_block_is_read(tmp_path: Path):
    tier = stored_tier(tmp_path, max_blocks=8, policy="wait_complete", timeout=0.0)
    opened = gate(tier.io.store)
    job = tier.prefetch(TOKENS, 0)
    time.sleep(0.05)
    assert not tier.ready(job)  # past its timeout, still waiting: only completion counts
    opened.set()
    assert job.done.wait(10) and tier.ready(job)
    assert len(tier.take(TOKENS, 0, job)) == 6
    tier.io.close(1)


def test_timeout_admits_at_its_bound_with_what_was_read(tmp_path: Path):
    bound = 0.2
    tier = stored_tier(tmp_path, max_blocks=8, policy="timeout", timeout=bound)
    opened = gate(tier.io.store)
    job = tier.prefetch(TOKENS, 0)
    assert not tier.ready(job)
    time.sleep(bound)
    assert tier.ready(job) and not job.done.is_set()  # admitted at the bound, the read still held
    opened.set()
    assert job.done.wait(10) and tier.ready(job)
    tier.io.close(1)


class GatedRuntime(DeviceRuntime):
    """Host memory whose slot reads complete only once `copied` is set (a device still copying)."""

    def __init__(self) -> None:
        self.copied = threading.Event()

    def read_slots_async(self, buffers: list[torch.Tensor], axis: int, slots: torch.Tensor) -> PendingRead:
        started = super().read_slots_async(buffers, axis, slots)
        return PendingRead(lambda: started.wait() if self.copied.wait(30) else None)


class Layout:
    def kv_buffer_shape(self, slots: int) -> tuple[int, ...]:
        return (2, slots, 1, 2)


class Runner:
    kv_buffers = [torch.arange(2 * 40 * 2, dtype=torch.float32).reshape(2, 40, 1, 2)]


def test_a_back_up_starts_the_device_read_and_the_writer_waits_for_it(tmp_path: Path):
    runtime = GatedRuntime()
    kv = KVPageIO(Runner(), Layout(), runtime)
    store = FilePageStore(tmp_path, "model")
    config = HiCacheConfig(tmp_path, BLOCK, "write_through", "wait_complete", 1.0, 0.0)
    tier = StorageTier(config, StorageIO(store, torch.float32, kv.block_shape(BLOCK), 4), kv, "model")
    slots = torch.tensor([9, 3, 30, 7, 1, 2, 5, 8])
    tier.back_up(TOKENS[: 2 * BLOCK], slots)  # returns with the read still under way
    assert not tier.io.flush(0.2) and store.stats.blocks_written == 0
    runtime.copied.set()
    assert tier.io.flush(10) and store.stats.blocks_written == 2
    for i, ref in enumerate(tier.refs(TOKENS[: 2 * BLOCK])):
        block = store.load(ref.key, ref.parent, ref.tokens, torch.float32, kv.block_shape(BLOCK))
        assert torch.equal(block, kv.read(slots[i * BLOCK : (i + 1) * BLOCK]))
    tier.io.close(1)
