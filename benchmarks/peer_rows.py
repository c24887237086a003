"""bench_peers' rows that need servers of their own: speculative decoding and a restart.

- Speculative decoding, single stream on prompts whose answer repeats them (bench_speculative's
  `REPEATING`: rewrite, extract, continue code), greedy, up to 96 new tokens, the best of 3
  rounds: ours with `--speculative-algorithm NGRAM` (upstream's defaults) against llama-server
  with `--spec-type ngram-simple`, and against the best of its other n-gram types
  (`ngram-map-k`, `ngram-mod`, `ngram-cache`), each with llama.cpp's default draft settings.
  Ours is flushed before each round, so its NGRAM corpus never holds an earlier round's answers.
- After a restart, the issue's workload: 32 concurrent completions on `RESTART_PREFIXES` distinct
  ~1000-token few-shot prefixes (interleaved) plus a question each, 32 new tokens. Ours runs on a
  pool too small for every prefix (`RESTART_KV_TOKENS`). Recomputed: a fresh server without a
  storage tier. Restored: a server with the storage tier (`--enable-hierarchical-cache
  --hicache-storage-backend file` on a fresh folder, `--hicache-storage-prefetch-policy timeout`)
  serves the round and stops, and a new one on that folder serves it again, reading the prefixes'
  KV from disk (under the default best_effort the first request of each prefix would be admitted
  before its read lands and compute it). llama-server: a fresh server, and one restarted with
  `--slot-save-path` that restores the 32 slots its predecessor saved (timed as part of the
  round) before the round (its fresh round, the recomputed one, saves them). Mean TTFT and total time.

Each function starts and stops its servers itself and returns `{row name: figure}`, in the
units and naming of bench_peers' table.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from bench_serving import BenchConfig, RequestInput, run_benchmark, served_model, started_server, warm_up
from bench_speculative import REPEATING

from sglang.ci.servers import LaunchSpec

SPEC_ROW_SIMPLE = "speculative decode, repeating prompts, vs ngram-simple, tokens/s"
SPEC_ROW_BEST = "speculative decode, repeating prompts, vs its best other n-gram type, tokens/s"
RESTART_PREFIXES = 4
RESTART_KV_TOKENS = 3072
"""Ours' pool in the restart rows: room for about two of the prefixes' groups, not all four."""
RESTART_TTFT_RECOMPUTED = f"{RESTART_PREFIXES} prefixes after a restart, recomputed: mean TTFT, ms"
RESTART_TOTAL_RECOMPUTED = f"{RESTART_PREFIXES} prefixes after a restart, recomputed: total, s"
RESTART_TTFT_RESTORED = f"{RESTART_PREFIXES} prefixes after a restart, storage / restored slots: mean TTFT, ms"
RESTART_TOTAL_RESTORED = f"{RESTART_PREFIXES} prefixes after a restart, storage / restored slots: total, s"
LLAMA_SPEC_TYPES = ("ngram-simple", "ngram-map-k", "ngram-mod", "ngram-cache")
SPEC_ROUNDS = 3
SPEC_NEW_TOKENS = 96
STORAGE_ENV = "SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR"
ROUND_TIMEOUT_S = 1800.0
"""A restart round's requests wait for one another: llama-server's fresh round at one thread on a
loaded 2-core machine ran past bench_serving's 600 s per request."""

SpecFactory = Callable[[list[str], dict[str, str]], LaunchSpec]
"""Makes a server's launch spec from extra flags and extra environment."""


def speculative_tokens_per_s(base_url: str, seed: int, before_round: Callable[[str], Any] | None = None) -> float:
    """Single-stream decode speed on the repeating prompts (the best of `SPEC_ROUNDS` rounds)."""
    model = served_model(base_url)
    warm_up(base_url, model, "chat")
    config = BenchConfig(base_url, model, "chat", concurrency=1, seed=seed)
    prompts = [RequestInput(prompt, SPEC_NEW_TOKENS) for prompt in REPEATING]
    rounds = []
    for _ in range(SPEC_ROUNDS):
        if before_round is not None:
            before_round(base_url)
        rounds.append(asyncio.run(run_benchmark(config, prompts)))
    return max(1000 / r["mean_tpot_ms"] for r in rounds)


def flush_cache(base_url: str) -> None:
    """Empties ours' prefix cache and NGRAM corpus, so no round drafts from an earlier round's
    answer to the same prompt (llama-server's n-gram types are given no such reset)."""
    httpx.post(f"{base_url}/flush_cache", timeout=60).raise_for_status()


def ours_speculative(ours: SpecFactory, log_dir: Path, seed: int) -> dict[str, float]:
    with started_server(ours(["--speculative-algorithm", "NGRAM"], {}), log_dir) as url:
        speed = speculative_tokens_per_s(url, seed, flush_cache)
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


RoundHook = Callable[[str], float]
"""Runs against a ready server's URL before or after a round; the seconds it took."""


def shared_prefix_round(
    spec: LaunchSpec,
    prompts: list[RequestInput],
    log_dir: Path,
    before: RoundHook | None = None,
    after: RoundHook | None = None,
) -> dict[str, float]:
    """One server, from a fresh start, serving `prompts` all at once: mean TTFT (ms) and total
    seconds, the total including `before` (a slot restore is part of a restarted round's cost)."""
    with started_server(spec, log_dir) as url:
        model = served_model(url)
        config = BenchConfig(url, model, "completions", len(prompts), ignore_eos=True, timeout_s=ROUND_TIMEOUT_S)
        prepared = before(url) if before else 0.0
        started = time.perf_counter()
        result: dict[str, Any] = asyncio.run(run_benchmark(config, prompts))
        seconds = time.perf_counter() - started
        if after:
            after(url)
    if result["failed"]:
        raise SystemExit(f"{spec.name}: {result['failed']} requests failed: {result['errors']}")
    figures = {"ttft": result["mean_ttft_ms"], "total": prepared + seconds}
    print(f"{spec.name} round: {figures} (before it: {prepared:.2f} s), load {os.getloadavg()}", flush=True)
    return figures


def restart_rows(recomputed: dict[str, float], restored: dict[str, float]) -> dict[str, float]:
    return {
        RESTART_TTFT_RECOMPUTED: recomputed["ttft"],
        RESTART_TOTAL_RECOMPUTED: recomputed["total"],
        RESTART_TTFT_RESTORED: restored["ttft"],
        RESTART_TOTAL_RESTORED: restored["total"],
    }


def ours_after_restart(ours: SpecFactory, log_dir: Path, prompts: list[RequestInput]) -> dict[str, float]:
    """Recomputed: a server without the storage tier (a restart forgets everything), one round.
    Restored: a server with the storage tier serves the round, stops; a new one on the same folder
    serves it again. Both on a `RESTART_KV_TOKENS` pool."""
    pool = ["--max-total-tokens", str(RESTART_KV_TOKENS)]
    recomputed = shared_prefix_round(ours(pool, {}), prompts, log_dir)
    storage = tempfile.mkdtemp(prefix="bench-peers-storage-")
    flags = [*pool, "--enable-hierarchical-cache", "--hicache-storage-backend", "file"]
    flags += ["--hicache-storage-prefetch-policy", "timeout"]
    shared_prefix_round(ours(flags, {STORAGE_ENV: storage}), prompts, log_dir)  # fills the storage
    restored = shared_prefix_round(ours(flags, {STORAGE_ENV: storage}), prompts, log_dir)
    print(f"ours after a restart: mean TTFT {recomputed['ttft'] / restored['ttft']:.2f}x lower from storage")
    return restart_rows(recomputed, restored)


def slot_action(url: str, slots: int, action: str) -> float:
    """Seconds llama-server takes to save or restore each of its slots to/from one file a slot."""
    started = time.perf_counter()
    for slot in range(slots):
        body = {"filename": f"slot-{slot}.bin"}
        httpx.post(f"{url}/slots/{slot}", params={"action": action}, json=body, timeout=600).raise_for_status()
    return time.perf_counter() - started


def llama_after_restart(theirs: SpecFactory, log_dir: Path, prompts: list[RequestInput]) -> dict[str, float]:
    """Recomputed: a fresh llama-server with `--slot-save-path` (nothing survives a restart
    unless restored), which then saves every slot (one per request: `-np` is the round's size).
    Restored: a new one on that folder restores them all, timed as part of its round, then
    serves the round, each request finding its own prompt in the slot its prompt matches best.
    Its KV pool stays bench_peers' `--kv-tokens`: a slot must hold its whole prompt, so the small
    pool ours runs on would not fit 32 slots."""
    slots = tempfile.mkdtemp(prefix="bench-peers-slots-")
    spec = lambda: theirs(["--slot-save-path", slots], {})
    save, restore = (lambda url, a=action: slot_action(url, len(prompts), a) for action in ("save", "restore"))
    recomputed = shared_prefix_round(spec(), prompts, log_dir, after=save)
    restored = shared_prefix_round(spec(), prompts, log_dir, before=restore)
    return restart_rows(recomputed, restored)
