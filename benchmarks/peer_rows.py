"""bench_peers' rows that need servers of their own: speculative decoding and a restart.

- Speculative decoding, single stream on prompts whose answer repeats them (bench_speculative's
  `REPEATING`: rewrite, extract, continue code), greedy, up to 96 new tokens, the best of 3
  rounds: ours with `--speculative-algorithm NGRAM` (upstream's defaults) against llama-server
  with `--spec-type ngram-simple`, and against the best of its other n-gram types
  (`ngram-map-k`, `ngram-mod`, `ngram-cache`), each with llama.cpp's default draft settings.
- Shared prefix after a restart: bench_peers' shared-prefix round, served by a server that was
  stopped after serving the same prompts once. Ours runs with the storage tier
  (`--enable-hierarchical-cache --hicache-storage-backend file` on a fresh folder,
  `--hicache-storage-prefetch-policy timeout`), so the restarted server reads the prefix's KV
  from disk; under the default best_effort the round's first request would be admitted before
  its read lands, compute the prefix and share it with the others, so disk would serve nothing.
  llama-server keeps its prompt cache in the process only, so its restarted round computes
  everything again.

Each function starts and stops its servers itself and returns `{row name: figure}`, in the
units and naming of bench_peers' table.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_serving import BenchConfig, RequestInput, run_benchmark, served_model, started_server, warm_up
from bench_speculative import REPEATING

from sglang.ci.servers import LaunchSpec

SPEC_ROW_SIMPLE = "speculative decode, repeating prompts, vs ngram-simple, tokens/s"
SPEC_ROW_BEST = "speculative decode, repeating prompts, vs its best other n-gram type, tokens/s"
RESTART_ROW = "shared prefix, after a restart, s"
LLAMA_SPEC_TYPES = ("ngram-simple", "ngram-map-k", "ngram-mod", "ngram-cache")
SPEC_ROUNDS = 3
SPEC_NEW_TOKENS = 96
STORAGE_ENV = "SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR"

SpecFactory = Callable[[list[str], dict[str, str]], LaunchSpec]
"""Makes a server's launch spec from extra flags and extra environment."""


def speculative_tokens_per_s(base_url: str, seed: int) -> float:
    """Single-stream decode speed on the repeating prompts (the best of `SPEC_ROUNDS` rounds)."""
    model = served_model(base_url)
    warm_up(base_url, model, "chat")
    config = BenchConfig(base_url, model, "chat", concurrency=1, seed=seed)
    prompts = [RequestInput(prompt, SPEC_NEW_TOKENS) for prompt in REPEATING]
    rounds = [asyncio.run(run_benchmark(config, prompts)) for _ in range(SPEC_ROUNDS)]
    return max(1000 / r["mean_tpot_ms"] for r in rounds)


def ours_speculative(ours: SpecFactory, log_dir: Path, seed: int) -> dict[str, float]:
    with started_server(ours(["--speculative-algorithm", "NGRAM"], {}), log_dir) as url:
        speed = speculative_tokens_per_s(url, seed)
    return {SPEC_ROW_SIMPLE: speed, SPEC_ROW_BEST: speed}


def llama_speculative(theirs: SpecFactory, log_dir: Path, seed: int) -> dict[str, float]:
    """Each of llama-server's n-gram types on its own server; ngram-simple, and the best other."""
    speeds = {}
    for spec_type in LLAMA_SPEC_TYPES:
        with started_server(theirs(["--spec-type", spec_type], {}), log_dir) as url:
            speeds[spec_type] = speculative_tokens_per_s(url, seed)
        print(f"llama-server --spec-type {spec_type}: {speeds[spec_type]:.1f} tokens/s", flush=True)
    others = [speeds[t] for t in LLAMA_SPEC_TYPES[1:]]
    return {SPEC_ROW_SIMPLE: speeds["ngram-simple"], SPEC_ROW_BEST: max(others)}


def shared_prefix_round(spec: LaunchSpec, prompts: list[RequestInput], log_dir: Path) -> float:
    """Seconds one server takes to serve `prompts` (32 at once), from a fresh start."""
    with started_server(spec, log_dir) as url:
        config = BenchConfig(url, served_model(url), "completions", concurrency=len(prompts), ignore_eos=True)
        started = time.perf_counter()
        result: dict[str, Any] = asyncio.run(run_benchmark(config, prompts))
        seconds = time.perf_counter() - started
    if result["failed"]:
        raise SystemExit(f"{spec.name}: {result['failed']} requests failed: {result['errors']}")
    return seconds


def ours_after_restart(ours: SpecFactory, log_dir: Path, prompts: list[RequestInput]) -> dict[str, float]:
    """The round on a server restarted over the storage folder the first one filled."""
    storage = tempfile.mkdtemp(prefix="bench-peers-storage-")
    flags = ["--enable-hierarchical-cache", "--hicache-storage-backend", "file"]
    flags += ["--hicache-storage-prefetch-policy", "timeout"]
    shared_prefix_round(ours(flags, {STORAGE_ENV: storage}), prompts, log_dir)  # fills the storage
    return {RESTART_ROW: shared_prefix_round(ours(flags, {STORAGE_ENV: storage}), prompts, log_dir)}


def llama_after_restart(theirs: SpecFactory, log_dir: Path, prompts: list[RequestInput]) -> dict[str, float]:
    """llama-server's restarted round: nothing survives its process, so one fresh round is it
    (serving the prompts once before would change nothing; that run is skipped)."""
    return {RESTART_ROW: shared_prefix_round(theirs([], {}), prompts, log_dir)}
