"""The hierarchical cache's file storage tier, on the embedded model in-process: KV blocks
round-trip bit for bit, a prefix served from storage gives the output computed from scratch,
corrupt / truncated / foreign blocks are never used, and a tiny pool under eviction pressure
keeps every slot accounted for."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
import torch

from sglang.runtime.memory.hicache_setup import model_identity
from sglang.runtime.memory.hierarchical_cache import HierarchicalCache
from sglang.runtime.memory.page_store import FilePageStore, block_keys
from sglang.runtime.scheduler.scheduler import Scheduler

from .runtime_harness import Runtime, corpus_ids, make_request

BLOCK = 16


def hicache_scheduler(rt: Runtime, folder: Path, **changes: object) -> Scheduler:
    extra = json.dumps({"storage_dir": str(folder), "block_tokens": BLOCK})
    # The storage tier on its own (no host tier), its reads awaited: the tests of the host tier
    # and of the prefetch policies are tests/runtime/test_host_tier.py.
    changes = {
        "max_total_tokens": 1024,
        "hicache_ratio": 0,
        "hicache_storage_prefetch_policy": "wait_complete",
        **changes,
    }
    return rt.make_scheduler(
        enable_hierarchical_cache=True,
        hicache_storage_backend="file",
        hicache_storage_backend_extra_config=extra,
        **changes,
    )


def hicache(scheduler: Scheduler) -> HierarchicalCache:
    assert scheduler.hicache is not None
    assert scheduler.hicache.flush(10)  # the writer thread's queue is on disk
    return scheduler.hicache


def assert_no_leak(scheduler: Scheduler) -> None:
    """Idle: every allocated slot is the tree's, and the tree's slots are all allocated."""
    assert not scheduler.running and not scheduler.waiting
    allocated = sorted(scheduler.allocator.allocated_slots().tolist())
    assert allocated == sorted(scheduler.cache.cached_slots().tolist())


def run_one(rt: Runtime, scheduler: Scheduler, ids: list[int], max_new_tokens: int = 6):
    request = make_request(ids, max_new_tokens=max_new_tokens)
    return rt.run_on(scheduler, [request])[request.rid]


def test_blocks_round_trip_bit_identical_and_storage_serves_the_same_output(rt: Runtime, tmp_path: Path):
    prompt = corpus_ids(rt.tokenizer, 5 * BLOCK + 7)
    first = hicache_scheduler(rt, tmp_path)
    cold = run_one(rt, first, prompt)
    assert cold.meta["cached_tokens"] == 0
    tier = hicache(first)
    assert tier.stats.storage_blocks_written >= 5
    # What is on disk is exactly what the pool holds for those tokens.
    match = first.cache.match_prefix(prompt)
    keys = block_keys(tier.storage.io.store.model_id, prompt, BLOCK)
    for i, key in enumerate(keys[:5]):
        tokens = prompt[i * BLOCK : (i + 1) * BLOCK]
        stored = tier.storage.io.store.load(
            key, keys[i - 1] if i else "", tokens, tier.storage.io.dtype, tier.storage.kv.block_shape(BLOCK)
        )
        assert stored is not None
        device = tier.storage.kv.read(match.slots[i * BLOCK : (i + 1) * BLOCK])
        assert stored.dtype == device.dtype and torch.equal(stored.view(torch.uint8), device.view(torch.uint8))
    assert_no_leak(first)

    # A fresh pool (a restarted server) on the same folder: the prefix comes from storage.
    second = hicache_scheduler(rt, tmp_path)
    warm = run_one(rt, second, prompt)
    assert warm.meta["cached_tokens"] == 5 * BLOCK
    assert second.stats["storage_hit_tokens"] == 5 * BLOCK
    assert warm.output_ids == cold.output_ids
    # Loaded into the pool bit for bit.
    loaded = hicache(second).storage.kv.read(second.cache.match_prefix(prompt).slots[: 5 * BLOCK])
    assert torch.equal(loaded, tier.storage.kv.read(match.slots[: 5 * BLOCK]))
    assert_no_leak(second)


def test_corrupt_truncated_and_foreign_blocks_are_never_used(rt: Runtime, tmp_path: Path):
    prompt = corpus_ids(rt.tokenizer, 6 * BLOCK + 3, offset=11)
    writer = hicache_scheduler(rt, tmp_path)
    reference = run_one(rt, writer, prompt)
    store = hicache(writer).storage.io.store
    keys = block_keys(store.model_id, prompt, BLOCK)

    def damage(index: int, how: str) -> None:
        path = store.path(keys[index])
        data = bytearray(path.read_bytes())
        if how == "corrupt":
            data[-5] ^= 0x40
        elif how == "truncate":
            data = data[: len(data) - 100]
        else:  # foreign: the same block claimed by another model
            header, _, payload = bytes(data).partition(b"\n")
            fields = json.loads(header)
            fields["model"] = "another-model"
            data = bytearray(json.dumps(fields).encode() + b"\n" + payload)
        path.write_bytes(bytes(data))

    for index, how, usable in ((4, "corrupt", 4), (2, "truncate", 2), (0, "foreign", 0)):
        damage(index, how)
        reader = hicache_scheduler(rt, tmp_path)
        outcome = run_one(rt, reader, prompt)
        assert outcome.meta["cached_tokens"] == usable * BLOCK, how
        assert outcome.output_ids == reference.output_ids, how
        assert hicache(reader).stats.storage_blocks_rejected == 1, how
        assert_no_leak(reader)
        # The bad block was removed, and rewritten whole by this run (write_through).
        assert (
            hicache(reader).storage.io.store.load(
                keys[index],
                keys[index - 1] if index else "",
                prompt[index * BLOCK : (index + 1) * BLOCK],
                hicache(reader).storage.io.dtype,
                hicache(reader).storage.kv.block_shape(BLOCK),
            )
            is not None
        ), how


def test_another_models_folder_is_never_read(rt: Runtime, tmp_path: Path):
    layers = [torch.nn.Linear(4, 4) for _ in range(2)]
    ids = {model_identity(layer, {"a": 1}, (2, 1, 3, 64), torch.float32) for layer in layers}
    assert len(ids) == 2  # same architecture, other weights: another identity
    same = model_identity(layers[0], {"a": 1}, (2, 1, 3, 64), torch.float32)
    assert same in ids
    prompt = corpus_ids(rt.tokenizer, 3 * BLOCK + 1, offset=29)
    writer = hicache_scheduler(rt, tmp_path)
    run_one(rt, writer, prompt)
    # Move this model's blocks under another identity: our server must not see them.
    own = hicache(writer).storage.io.store.root
    own.rename(own.with_name("f" * 32))
    reader = hicache_scheduler(rt, tmp_path)
    assert run_one(rt, reader, prompt).meta["cached_tokens"] == 0


@pytest.mark.parametrize("policy", ["write_back", "write_through_selective"])
def test_a_tiny_pool_under_eviction_pressure_reloads_evicted_prefixes(rt: Runtime, tmp_path: Path, policy: str):
    prefixes = [corpus_ids(rt.tokenizer, 4 * BLOCK, offset=37 * i) for i in range(5)]
    prompts = [p + corpus_ids(rt.tokenizer, 5, offset=500 + i) for i, p in enumerate(prefixes)]
    scheduler = hicache_scheduler(
        rt, tmp_path, max_total_tokens=6 * BLOCK, hicache_write_policy=policy, radix_eviction_policy="fifo"
    )
    first = [run_one(rt, scheduler, p, max_new_tokens=3) for p in prompts]
    # Nothing was reused yet: what is stored was stored on its way out of the pool.
    assert hicache(scheduler).stats.storage_blocks_written >= 4 * 4
    again = [run_one(rt, scheduler, p, max_new_tokens=3) for p in prompts]
    assert [o.output_ids for o in again] == [o.output_ids for o in first]
    # Each prompt's prefix was evicted by the ones after it and came back from storage.
    assert scheduler.stats["storage_hit_tokens"] >= 4 * 4 * BLOCK
    assert all(o.meta["cached_tokens"] >= 4 * BLOCK for o in again)
    assert_no_leak(scheduler)


def test_a_request_without_room_keeps_its_stored_prefix_for_when_room_comes(rt: Runtime, tmp_path: Path):
    """After a restart, on a pool with room for one prefix's requests at a time: the requests of
    the second prefix wait while the first's run, and still get their prefix from storage then
    (the room is checked before loading: a load that found no room ended the prefetch, and the
    prefix was recomputed)."""
    prefixes = [corpus_ids(rt.tokenizer, 4 * BLOCK, offset=41 * i) for i in range(2)]
    prompts = [prefixes[i % 2] + corpus_ids(rt.tokenizer, 5, offset=600 + i) for i in range(4)]
    writer = hicache_scheduler(rt, tmp_path)
    first = [run_one(rt, writer, p, max_new_tokens=3) for p in prompts]
    hicache(writer)
    restarted = hicache_scheduler(rt, tmp_path, max_total_tokens=6 * BLOCK)
    requests = [make_request(p, max_new_tokens=3) for p in prompts]
    outcomes = rt.run_on(restarted, requests)
    assert [outcomes[r.rid].output_ids for r in requests] == [o.output_ids for o in first]
    assert all(outcomes[r.rid].meta["cached_tokens"] >= 4 * BLOCK for r in requests)
    assert restarted.stats["storage_hit_tokens"] >= 2 * 4 * BLOCK
    assert_no_leak(restarted)


def test_concurrent_writers_never_expose_a_partial_block(tmp_path: Path):
    block = torch.randn(3, 2, BLOCK, 3, 64)
    tokens = list(range(BLOCK))
    key = block_keys("m", tokens, BLOCK)[0]
    stores = [FilePageStore(tmp_path, "m") for _ in range(3)]
    seen: list[bool] = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            got = stores[0].load(key, "", tokens, block.dtype, block.shape)
            if got is not None:
                seen.append(torch.equal(got, block))

    reader = threading.Thread(target=read)
    reader.start()
    writers = [threading.Thread(target=lambda s=s: [s.save(key, "", tokens, block) for _ in range(30)]) for s in stores]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    stop.set()
    reader.join()
    assert stores[0].stats.blocks_rejected == 0  # no reader ever saw a half-written file
    assert all(seen)  # before the first publish a read misses without a rejection
    assert torch.equal(stores[1].load(key, "", tokens, block.dtype, block.shape), block)
    assert [p.name for p in stores[0].path(key).parent.iterdir()] == [f"{key}.kv"]  # no temporary left


def test_unwritable_storage_stores_nothing_and_fails_nothing(rt: Runtime, tmp_path: Path):
    """A folder that cannot be created (its parent is a regular file: refused even to root, as a
    read-only or full disk refuses a write) costs the cache, never the request."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    scheduler = hicache_scheduler(rt, blocker / "hicache")
    prompt = corpus_ids(rt.tokenizer, 3 * BLOCK + 2, offset=3)
    outcome = run_one(rt, scheduler, prompt)
    assert outcome.finished_by == "length" and len(outcome.output_ids) == 6
    stats = hicache(scheduler).stats
    assert stats.storage_blocks_written == 0 and stats.storage_write_errors >= 1
    assert_no_leak(scheduler)
