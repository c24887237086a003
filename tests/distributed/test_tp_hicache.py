"""The hierarchical cache under `--tp-size 2`: each rank stores its shard of the KV under its own
identity, keyed by model, tp size and rank, so a folder written at one tp size is never read at
another and one rank never reads another's shard; a tp=2 engine restarted on its storage folder
serves the stored prefix from there (every rank loading its own shard) with identical output, and
after a flush serves it from the host tier (every rank's own host rows).

The restart is two tp=2 engines (slow); the keying rule runs by default."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglang.runtime.engine import Engine
from sglang.runtime.memory.hicache_setup import rank_identity

BLOCK = 32
PROMPT = " ".join(f"Item {i}: the {['red', 'green', 'blue'][i % 3]} box holds {i * 7 % 11} stones." for i in range(30))


def test_each_rank_of_each_tp_size_stores_under_its_own_identity():
    model = "0123456789abcdef0123456789abcdef"
    assert rank_identity(model, 0, 1) == model  # what a tp=1 server has always stored under
    names = {rank_identity(model, rank, size) for size in (2, 4) for rank in range(size)}
    assert len(names) == 6 and model not in names
    assert rank_identity(model, 1, 2) == rank_identity(model, 1, 2)  # a restarted rank finds its files
    assert rank_identity("another model".ljust(32), 1, 2) != rank_identity(model, 1, 2)


def engine(folder: Path) -> Engine:
    extra = {"storage_dir": str(folder), "block_tokens": BLOCK}
    return Engine(
        tp_size=2,
        device="cpu",
        dtype="float32",
        cpu_threads=1,
        max_total_tokens=2048,
        enable_hierarchical_cache=True,
        hicache_storage_backend="file",
        hicache_storage_prefetch_policy="wait_complete",
        hicache_storage_backend_extra_config=json.dumps(extra),
    )


@pytest.mark.slow  # two engines of two rank processes each
def test_tp2_stored_prefix_survives_a_restart_and_the_host_tier_serves_it(tmp_path: Path):
    folder = tmp_path / "hicache"
    params = {"temperature": 0.0, "max_new_tokens": 8}
    with engine(folder) as first:
        cold = first.generate(PROMPT, params)
    assert cold["meta_info"]["cached_tokens"] == 0
    rank_folders = sorted(p for p in folder.iterdir() if p.is_dir())
    assert len(rank_folders) == 2, "each rank stores its shard in a folder of its own"
    counts = [len(list(p.rglob("*.kv"))) for p in rank_folders]
    prompt_tokens = cold["meta_info"]["prompt_tokens"]
    assert counts[0] == counts[1] >= prompt_tokens // BLOCK  # the prompt's blocks, and the output's

    with engine(folder) as second:
        warm = second.generate(PROMPT, params)
        stored = (prompt_tokens - 1) // BLOCK * BLOCK
        assert warm["meta_info"]["cached_tokens"] == stored >= 300
        assert warm["meta_info"]["cached_tokens_details"]["storage"] == stored
        assert warm["output_ids"] == cold["output_ids"]

        assert second.flush_cache()  # the device tier empties; each rank's host rows keep the prompt
        again = second.generate(PROMPT, params)
        assert again["meta_info"]["cached_tokens_details"]["host"] == prompt_tokens - 1
        assert again["output_ids"] == cold["output_ids"]
