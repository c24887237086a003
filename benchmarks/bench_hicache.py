"""Hierarchical cache across a restart: bench_peers' shared-prefix workload (concurrent
completions, each a ~1000-token few-shot prefix plus its own question, 32 new tokens) on a KV
pool too small to hold every prompt at once, served cold, then again by a restarted server.

Arms, one server at a time, the same prompts: `recompute` (no hierarchical cache: the
restarted server computes the prefix again) and one `hicache <policy>` arm per
`--prefetch-policies` value (`--enable-hierarchical-cache --hicache-storage-backend file
--hicache-storage-prefetch-policy <policy>` on one fresh folder: the restarted server loads the
prefix's KV blocks from storage). Under best_effort (upstream's default) a request is admitted
without waiting for its read: on an idle server the first request of the round is admitted at
once and computes the prefix, and the others share it on the device, so storage serves nothing;
timeout and wait_complete wait for the read. Reported per arm and round: mean and median time to
first token, total time, and the storage folder's size. Target: after the restart, mean TTFT at
least 3x lower with the storage tier than recomputing.

    .venv/bin/python benchmarks/bench_hicache.py [--requests 32] [--kv-tokens 4096] [--threads 2]
        [--prefetch-policies best_effort,timeout]

`--tiers`: instead, the time to first token of one long (~900-token) prompt served from each
source, interleaved round by round so that every source sees the same machine load: `recompute`
(a prompt never seen), `host` (the same prompt again after another one of the same length evicted
it from a pool too small for both, `--kv-tokens`, 1536 by default: it comes back from the host
tier) and `storage` (the same prompt sent to a second server, started with `--hicache-ratio 0` on
the same storage folder, that has never seen it: it is read from disk, `wait_complete`). One new
token per request, so the time is the TTFT; each sample's `cached_tokens_details` is checked to
come from the tier it is filed under. The load average is printed before and after.

    .venv/bin/python benchmarks/bench_hicache.py --tiers [--rounds 5] [--threads 2] [--kv-tokens 1536]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
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


STORAGE_ENV = "SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR"
TIERS = ("recompute", "host", "storage")
TIERS_KV_TOKENS = 1536
"""`--tiers`' pool unless `--kv-tokens` says otherwise: room for one of its prompts, not two."""


def first_token(url: str, prompt: str) -> tuple[float, dict[str, Any]]:
    """Seconds to generate one token for `prompt`, and where its cached tokens came from."""
    body = {"text": prompt, "sampling_params": {"max_new_tokens": 1, "temperature": 0}}
    started = time.perf_counter()
    response = httpx.post(f"{url}/generate", json=body, timeout=600)
    elapsed = time.perf_counter() - started
    response.raise_for_status()
    return elapsed, response.json()["meta_info"]["cached_tokens_details"]


def tier_rounds(args: argparse.Namespace) -> None:
    """The `--tiers` benchmark (see the module docstring)."""
    flags = ["--cpu-threads", str(args.threads), "--max-total-tokens", str(args.kv_tokens or TIERS_KV_TOKENS)]
    flags += ["--enable-hierarchical-cache", "--hicache-storage-backend", "file"]
    flags += ["--hicache-storage-prefetch-policy", "wait_complete"]
    samples: dict[str, list[float]] = {tier: [] for tier in TIERS}
    cached: dict[str, list[int]] = {tier: [] for tier in TIERS}  # tokens from the tier named
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-hicache-") as storage:
        env = {STORAGE_ENV: storage}
        host_spec = our_server("bench-hicache-host", flags, env)
        storage_spec = our_server("bench-hicache-storage", [*flags, "--hicache-ratio", "0"], env)
        with started_server(host_spec, args.log_dir) as host, started_server(storage_spec, args.log_dir) as disk:
            for round_ in range(args.rounds + 1):  # round 0 warms both servers up, unmeasured
                prompt, evictor = (
                    shared_prefix_prompts(1, random.Random(args.seed * 1000 + 2 * round_ + i))[0].prompt
                    for i in range(2)
                )
                for tier in TIERS:
                    if tier == "host":  # another prompt takes the pool: ours is evicted to the host tier
                        _, details = first_token(host, evictor)
                        if details["host"] or details["storage"]:
                            raise SystemExit(f"round {round_}: the evicting prompt was cached: {details}")
                    if tier == "storage":
                        time.sleep(1.0)  # the host server's writer thread puts the blocks on disk
                    elapsed, details = first_token(disk if tier == "storage" else host, prompt)
                    from_tier = sum(details[t] for t in ("host", "storage")) if tier == "recompute" else details[tier]
                    if (tier == "recompute") != (from_tier < 64):
                        raise SystemExit(f"round {round_}: {tier} sample served as {details}")
                    if round_:
                        samples[tier].append(elapsed)
                        cached[tier].append(from_tier)
                print(f"round {round_}: " + ", ".join(f"{t} {samples[t][-1] * 1000:.0f} ms" for t in TIERS if round_))
    load_after = os.getloadavg()
    print(f"\nload average (1, 5, 15 min) before: {load_before}, after: {load_after}")
    print("\n| source | tokens from it | mean TTFT, ms | median TTFT, ms | vs recompute |\n|---|---|---|---|---|")
    recompute = statistics.mean(samples["recompute"])
    for tier in TIERS:
        mean, median = statistics.mean(samples[tier]), statistics.median(samples[tier])
        tokens = statistics.mean(cached[tier])
        print(f"| {tier} | {tokens:.0f} | {mean * 1000:.0f} | {median * 1000:.0f} | {recompute / mean:.1f}x |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=32)
    pool_help = f"KV pool of each server, in tokens (4096; --tiers: {TIERS_KV_TOKENS})."
    parser.add_argument("--kv-tokens", type=int, default=None, help=pool_help)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--log-dir", type=Path, default=Path("/tmp"))
    parser.add_argument("--seed", type=int, default=1)
    policies_help = "hicache arms: --hicache-storage-prefetch-policy values, comma-separated."
    parser.add_argument("--prefetch-policies", default="best_effort,timeout", help=policies_help)
    parser.add_argument("--tiers", action="store_true", help="TTFT from each cache tier, interleaved.")
    parser.add_argument("--rounds", type=int, default=5, help="--tiers: measured rounds.")
    args = parser.parse_args()
    if args.tiers:
        tier_rounds(args)
        return
    prompts = shared_prefix_prompts(args.requests, random.Random(args.seed))
    base = ["--cpu-threads", str(args.threads), "--max-total-tokens", str(args.kv_tokens or 4096)]
    rows: dict[str, dict[str, Any]] = {}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-hicache-") as storage:
        hicache = [*base, "--enable-hierarchical-cache", "--hicache-storage-backend", "file"]
        arms = {"recompute": (base, {})}
        for policy in args.prefetch_policies.split(","):
            flags = [*hicache, "--hicache-storage-prefetch-policy", policy]
            arms[f"hicache {policy}"] = (flags, {STORAGE_ENV: storage})
        for arm, (flags, env) in arms.items():
            for round_ in ("cold", "after restart"):
                name = f"bench-{arm.replace(' ', '-')}"
                rows[f"{arm}, {round_}"] = serve_round(flags, env, prompts, args.log_dir, name)
                print(f"{arm}, {round_}: {rows[f'{arm}, {round_}']}", flush=True)
        stored = folder_bytes(Path(storage))
    print(f"\nstorage tier after the runs: {stored / 2**20:.1f} MiB")
    print("\n| arm, round | mean TTFT, ms | median TTFT, ms | total, s |\n|---|---|---|---|")
    for name, row in rows.items():
        print(f"| {name} | {row['mean TTFT, ms']:.0f} | {row['median TTFT, ms']:.0f} | {row['total, s']:.1f} |")
    print(f"\nload average (1, 5, 15 min) before: {load_before}, after: {os.getloadavg()}")
    recompute = rows["recompute, after restart"]["mean TTFT, ms"]
    for arm in arms:
        if arm != "recompute":
            speedup = recompute / rows[f"{arm}, after restart"]["mean TTFT, ms"]
            print(f"after a restart, mean TTFT: {speedup:.1f}x lower with {arm} (target: 3x)")


if __name__ == "__main__":
    main()
