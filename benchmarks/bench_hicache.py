"""Hierarchical cache across a restart: bench_peers' shared-prefix workload (concurrent
completions, each a ~1000-token few-shot prefix plus its own question, 32 new tokens) on a KV
pool too small to hold every prompt at once, served cold, then again by a restarted server.

Two arms, one server at a time, the same prompts: `recompute` (no hierarchical cache: the
restarted server computes the prefix again) and `hicache` (`--enable-hierarchical-cache
--hicache-storage-backend file` on a fresh folder: the restarted server loads the prefix's KV
blocks from storage). Reported per arm and round: mean and median time to first token, total
time, and the storage folder's size. Target: after the restart, mean TTFT at least 3x lower
with the storage tier than recomputing.

    .venv/bin/python benchmarks/bench_hicache.py [--requests 32] [--kv-tokens 4096] [--threads 2]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_peers import shared_prefix_prompts
from bench_serving import BenchConfig, our_server, run_benchmark, served_model, started_server


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def serve_round(flags: list[str], env: dict[str, str], prompts: list, log_dir: Path, name: str) -> dict[str, Any]:
    """Starts a server, runs the workload once, stops it; the round's figures."""
    spec = our_server(name, flags, env)
    with started_server(spec, log_dir) as url:
        config = BenchConfig(url, served_model(url), "completions", concurrency=len(prompts), ignore_eos=True)
        started = time.perf_counter()
        result = asyncio.run(run_benchmark(config, prompts))
        total = time.perf_counter() - started
    if result["failed"]:
        raise SystemExit(f"{name}: {result['failed']} requests failed: {result['errors']}")
    return {"mean TTFT, ms": result["mean_ttft_ms"], "median TTFT, ms": result["median_ttft_ms"], "total, s": total}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--kv-tokens", type=int, default=4096, help="KV pool of each server, in tokens.")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--log-dir", type=Path, default=Path("/tmp"))
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    prompts = shared_prefix_prompts(args.requests, random.Random(args.seed))
    base = ["--cpu-threads", str(args.threads), "--max-total-tokens", str(args.kv_tokens)]
    rows: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-hicache-") as storage:
        arms = {
            "recompute": (base, {}),
            "hicache": (
                [*base, "--enable-hierarchical-cache", "--hicache-storage-backend", "file"],
                {"SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR": storage},
            ),
        }
        for arm, (flags, env) in arms.items():
            for round_ in ("cold", "after restart"):
                rows[f"{arm}, {round_}"] = serve_round(flags, env, prompts, args.log_dir, f"bench-{arm}")
                print(f"{arm}, {round_}: {rows[f'{arm}, {round_}']}", flush=True)
        stored = folder_bytes(Path(storage))
    print(f"\nstorage tier after the runs: {stored / 2**20:.1f} MiB")
    print("\n| arm, round | mean TTFT, ms | median TTFT, ms | total, s |\n|---|---|---|---|")
    for name, row in rows.items():
        print(f"| {name} | {row['mean TTFT, ms']:.0f} | {row['median TTFT, ms']:.0f} | {row['total, s']:.1f} |")
    speedup = rows["recompute, after restart"]["mean TTFT, ms"] / rows["hicache, after restart"]["mean TTFT, ms"]
    print(f"\nafter a restart, mean TTFT: {speedup:.1f}x lower with the storage tier (target: 3x)")


if __name__ == "__main__":
    main()
