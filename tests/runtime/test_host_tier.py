"""The hierarchical cache's host tier and its storage traffic off the step, on the embedded model
in-process: a prefix evicted from the pool comes back from host memory bit for bit with the same
greedy output, each write policy backs blocks up when it says, each prefetch policy admits a
waiting request when it says (the disk is held back by a gate), and storage writes never hold
up a step yet are all on disk after a flush."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from sglang.runtime.memory.hierarchical_cache import HierarchicalCache
from sglang.runtime.memory.page_store import FilePageStore
from sglang.runtime.observability.metrics import ServerMetrics
from sglang.runtime.scheduler.process import scheduler_status
from sglang.runtime.scheduler.scheduler import Scheduler

from .runtime_harness import Outcome, Runtime, corpus_ids, make_request, model_threads

BLOCK = 16
PREFIX = 4 * BLOCK


def tiered(rt: Runtime, folder: Path | None = None, extra: dict[str, Any] | None = None, **changes: Any) -> Scheduler:
    """A scheduler with a six-block pool and the hierarchical cache: a host tier four times the
    pool unless `hicache_ratio` says otherwise, a storage tier in `folder` if given."""
    config: dict[str, Any] = {"block_tokens": BLOCK, **(extra or {})}
    if folder is not None:
        config["storage_dir"] = str(folder)
        changes["hicache_storage_backend"] = "file"
    changes = {"max_total_tokens": 6 * BLOCK, "hicache_ratio": 4, **changes}
    return rt.make_scheduler(
        enable_hierarchical_cache=True, hicache_storage_backend_extra_config=json.dumps(config), **changes
    )


def tier(scheduler: Scheduler) -> HierarchicalCache:
    assert scheduler.hicache is not None
    return scheduler.hicache


def prompt(rt: Runtime, i: int) -> list[int]:
    """A four-block prefix of its own and a short tail."""
    return corpus_ids(rt.tokenizer, PREFIX, offset=37 * i) + corpus_ids(rt.tokenizer, 5, offset=500 + i)


def run_one(rt: Runtime, scheduler: Scheduler, ids: list[int], **kwargs: Any) -> Outcome:
    request = make_request(ids, max_new_tokens=4)
    return rt.run_on(scheduler, [request], **kwargs)[request.rid]


def assert_no_leak(scheduler: Scheduler) -> None:
    assert not scheduler.running and not scheduler.waiting
    assert sorted(scheduler.allocator.allocated_slots().tolist()) == sorted(scheduler.cache.cached_slots().tolist())
    host = tier(scheduler).host
    rows = scheduler.cache.host_rows().tolist()
    assert len(set(rows)) == len(rows) == (host.pool.used_tokens if host is not None else 0)


def gate(store: FilePageStore, method: str) -> threading.Event:
    """Holds every `store.<method>` call (on the storage threads) until the event is set."""
    opened = threading.Event()
    original: Callable[..., Any] = getattr(store, method)

    def held(*args: Any) -> Any:
        assert opened.wait(30), "the gate was never opened"
        return original(*args)

    setattr(store, method, held)
    return opened


def test_a_prefix_evicted_from_the_pool_comes_back_from_host_identical(rt: Runtime):
    scheduler = tiered(rt, hicache_write_policy="write_back", radix_eviction_policy="fifo")
    first = run_one(rt, scheduler, prompt(rt, 0))
    io = tier(scheduler).host.io
    kv = io.read(scheduler.cache.match_prefix(prompt(rt, 0)).slots[:PREFIX])
    for i in (1, 2):
        run_one(rt, scheduler, prompt(rt, i))
    assert scheduler.cache.cached_len(prompt(rt, 0)) < BLOCK  # gone from the pool
    again = run_one(rt, scheduler, prompt(rt, 0))
    details = again.meta["cached_tokens_details"]
    # Everything but the last prompt token (always computed) is cached: the host tier keeps
    # tokens, not whole blocks.
    whole = len(prompt(rt, 0)) - 1
    assert again.meta["cached_tokens"] == whole and "storage" not in details  # no storage tier
    assert details["host"] == whole - details["device"] >= 3 * BLOCK
    assert again.output_ids == first.output_ids
    reloaded = io.read(scheduler.cache.match_prefix(prompt(rt, 0)).slots[:PREFIX])
    assert torch.equal(reloaded.view(torch.uint8), kv.view(torch.uint8))
    assert scheduler.stats["host_hit_tokens"] == details["host"]
    # Per tier, the counters add up to cached_tokens, and /metrics reports them under those names.
    status = scheduler_status(scheduler)
    tiers = {name: getattr(status, f"{name}_hit_tokens") for name in ("device", "host", "storage")}
    assert sum(tiers.values()) == status.cached_tokens and status.host_tokens > 0
    text = ServerMetrics("m").render(status).decode()
    for name, hits in tiers.items():
        assert f'sglang_cache_hit_tokens{{tier="{name}"}} {float(hits)}' in text
    assert_no_leak(scheduler)


CACHED = PREFIX + 5 - 1
"""What a request reuses of `prompt(rt, i)`: all but its last token."""
COMPUTED = PREFIX + 5 + 4 - 1
"""What a request of `prompt(rt, i)` with 4 new tokens hands to the tree: all but its last token."""


@pytest.mark.parametrize(
    ("policy", "after_each_run"),
    [
        ("write_through", [COMPUTED] * 3),  # every hand-over
        ("write_through_selective", [0, 0, CACHED]),  # the prefix, once a second request reused it
        ("write_back", [0, 0, 0]),  # only on eviction
    ],
)
def test_each_write_policy_backs_tokens_up_when_it_says(rt: Runtime, policy: str, after_each_run: list[int]):
    scheduler = tiered(rt, hicache_write_policy=policy)
    host = tier(scheduler).host
    assert host is not None
    seen = []
    for _ in after_each_run:
        run_one(rt, scheduler, prompt(rt, 3))
        seen.append(host.pool.used_tokens)
    assert seen == after_each_run
    scheduler.cache.evict(10**6, scheduler.free_slots)  # evicted nodes are backed up under every policy
    assert host.pool.used_tokens == COMPUTED
    assert_no_leak(scheduler)


@pytest.fixture(scope="module")
def stored(runtime: Runtime, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Outcome]:
    """A storage folder holding `prompt(runtime, 5)`'s prefix, and that prompt's outcome."""
    folder = tmp_path_factory.mktemp("hicache")
    writer = tiered(runtime, folder, hicache_ratio=0)
    with model_threads():
        outcome = run_one(runtime, writer, prompt(runtime, 5))
    assert tier(writer).flush(10)
    tier(writer).close(1)
    return folder, outcome


def test_best_effort_admits_at_once_and_recomputes_what_is_not_read_yet(rt: Runtime, stored: tuple[Path, Outcome]):
    folder, reference = stored
    scheduler = tiered(rt, folder, hicache_ratio=0, hicache_storage_prefetch_policy="best_effort")
    opened = gate(tier(scheduler).storage.io.store, "load")
    outcome = run_one(rt, scheduler, prompt(rt, 5))
    opened.set()
    assert outcome.meta["cached_tokens_details"] == {"device": 0, "host": 0, "storage": 0, "storage_backend": "file"}
    assert outcome.output_ids == reference.output_ids
    tier(scheduler).close(1)


def test_wait_complete_admits_once_the_read_is_done(rt: Runtime, stored: tuple[Path, Outcome]):
    folder, reference = stored
    scheduler = tiered(rt, folder, hicache_ratio=0, hicache_storage_prefetch_policy="wait_complete")
    opened = gate(tier(scheduler).storage.io.store, "load")

    def hold_then_open(step: int, s: Scheduler) -> None:
        if step == 5:
            assert s.waiting and not s.running  # held back while the disk is
            opened.set()

    outcome = run_one(rt, scheduler, prompt(rt, 5), between_steps=hold_then_open)
    assert opened.is_set()
    assert outcome.meta["cached_tokens_details"] == {
        "device": 0,
        "host": 0,
        "storage": PREFIX,
        "storage_backend": "file",
    }
    assert outcome.output_ids == reference.output_ids
    tier(scheduler).close(1)


def test_timeout_admits_after_its_bound_with_what_was_read(rt: Runtime, stored: tuple[Path, Outcome]):
    folder, reference = stored
    bound = {"prefetch_timeout_base": 0.3, "prefetch_timeout_per_ki_token": 0}
    scheduler = tiered(rt, folder, bound, hicache_ratio=0, hicache_storage_prefetch_policy="timeout")
    opened = gate(tier(scheduler).storage.io.store, "load")
    start = time.monotonic()
    outcome = run_one(rt, scheduler, prompt(rt, 5))
    opened.set()
    assert time.monotonic() - start >= 0.3
    assert outcome.meta["cached_tokens"] == 0 and outcome.output_ids == reference.output_ids
    tier(scheduler).close(1)


def test_storage_writes_never_hold_up_a_step_and_a_flush_lands_them(rt: Runtime, tmp_path: Path):
    scheduler = tiered(rt, tmp_path, hicache_write_policy="write_through")
    store = tier(scheduler).storage.io.store
    opened = gate(store, "save")
    outcome = run_one(rt, scheduler, prompt(rt, 6))  # finishes with every write held at the gate
    assert outcome.finish_reason is not None
    assert not tier(scheduler).flush(0.05)
    opened.set()
    assert tier(scheduler).flush(10)
    assert store.stats.blocks_written == PREFIX // BLOCK == len(list(store.root.rglob("*.kv")))
    tier(scheduler).close(1)
