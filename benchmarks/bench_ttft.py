"""Where a short prompt's time to first token goes: client TTFT and per-stage medians.

Starts `sglang serve` (the embedded model) once per code tree given (default: this checkout)
with `SGLANG_REQUEST_STAMPS` set, then sends `--requests` short prompts one at a time, streamed,
alternating OpenAI chat and native `/generate`, and with several trees, alternating which server
goes first in each round (interleaved, so load bursts hit every tree alike). Each prompt is
distinct words (no prefix-cache hits). Printed per tree and endpoint: the client's median TTFT
(first chunk with text), the server's (`http_received` to `first_byte_sent`), and the median of
each stage between consecutive stamps (`runtime/observability/request_stamps.py`). A tree
without stamps (an older commit) still gets its client TTFT.

    .venv/bin/python benchmarks/bench_ttft.py [--requests 40] [--tree /tmp/base --tree .]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import statistics
import tempfile
import time
from collections import defaultdict
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
from bench_serving import WORDS, our_server, served_model, started_server

from sglang.runtime.observability.request_stamps import ENV, STAGES

ENDPOINTS = ("openai", "native")


def request(endpoint: str, model: str, prompt: str, rid: str, new_tokens: int) -> tuple[str, dict[str, Any]]:
    """The path and body of one streamed greedy request."""
    if endpoint == "openai":
        return "/v1/chat/completions", {
            "model": model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": new_tokens,
            "temperature": 0,
            "ignore_eos": True,
            "stream": True,
            "rid": rid,
        }
    params = {"max_new_tokens": new_tokens, "temperature": 0, "ignore_eos": True}
    return "/generate", {"text": prompt, "sampling_params": params, "stream": True, "rid": rid}


def has_text(payload: dict[str, Any]) -> bool:
    if "text" in payload:  # native: the cumulative text
        return bool(payload["text"])
    return any((c.get("delta") or {}).get("content") for c in payload.get("choices") or [])


def client_ttft(client: httpx.Client, url: str, body: dict[str, Any]) -> float:
    """Seconds from sending to the first streamed chunk that carries text."""
    started = time.perf_counter()
    with client.stream("POST", url, json=body) as response:
        response.raise_for_status()
        ttft = None
        for line in response.iter_lines():
            if ttft is None and line.startswith("data: {") and has_text(json.loads(line[6:])):
                ttft = time.perf_counter() - started
    if ttft is None:
        raise RuntimeError(f"no text was streamed from {url}")
    return ttft


def stage_durations(path: Path) -> dict[str, dict[str, float]]:
    """Per request id: milliseconds between consecutive stamped stages (named `a -> b`),
    `server` (first to last stamp) and `server less forward` (all but the model call)."""
    stamps: dict[str, dict[str, int]] = defaultdict(dict)
    if path.exists():
        for line in path.read_text().splitlines():
            record = json.loads(line)
            stamps[record["rid"]].setdefault(record["stage"], record["ns"])
    durations = {}
    for rid, by_stage in stamps.items():
        present = [s for s in STAGES if s in by_stage]
        steps = {f"{a} -> {b}": (by_stage[b] - by_stage[a]) / 1e6 for a, b in itertools.pairwise(present)}
        steps["server"] = (by_stage[present[-1]] - by_stage[present[0]]) / 1e6
        forward = steps.get("forward_started -> forward_ended")
        if forward is not None:  # what is not the model: the figure a loaded machine moves least
            steps["server less forward"] = steps["server"] - forward
        durations[rid] = steps
    return durations


def report(name: str, ttfts: dict[str, list[float]], durations: dict[str, dict[str, float]]) -> None:
    print(f"\n## {name}")
    for endpoint in ENDPOINTS:
        client = statistics.median(ttfts[endpoint]) * 1000
        rows = [d for rid, d in durations.items() if rid.startswith(endpoint)]
        print(f"\n{endpoint}: client TTFT median {client:.1f} ms over {len(ttfts[endpoint])} requests")
        if not rows:
            continue
        print("| stage | median ms |\n|---|---|")
        for key in rows[0]:
            values = [r[key] for r in rows if key in r]
            print(f"| {key} | {statistics.median(values):.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=40, help="Per endpoint and tree.")
    parser.add_argument("--new-tokens", type=int, default=2)
    parser.add_argument("--prompt-words", type=int, default=12)
    parser.add_argument("--tree", action="append", type=Path, help="Code tree to serve from (repeatable).")
    parser.add_argument("--our-args", default="", help="Extra flags for `sglang serve`.")
    parser.add_argument("--log-dir", type=Path, default=Path("/tmp"))
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    trees = [tree.resolve() for tree in args.tree or [Path(__file__).resolve().parent.parent]]
    folder = Path(tempfile.mkdtemp(prefix="bench-ttft-"))
    stamp_files = [folder / f"stamps-{i}.jsonl" for i in range(len(trees))]
    rng = random.Random(args.seed)
    ttfts = [{endpoint: [] for endpoint in ENDPOINTS} for _ in trees]
    with ExitStack() as stack:
        urls = []
        for i, tree in enumerate(trees):
            env = {"PYTHONPATH": str(tree), ENV: str(stamp_files[i])}
            spec = our_server(f"bench-ttft-{i}", args.our_args.split(), env)
            urls.append(stack.enter_context(started_server(spec, args.log_dir)))
        client = stack.enter_context(httpx.Client(timeout=120))
        models = [served_model(url) for url in urls]
        for url, model in zip(urls, models, strict=True):  # warm-up, unmeasured and unstamped
            for endpoint in ENDPOINTS:
                path, body = request(endpoint, model, "Hello there", f"warm-{endpoint}", args.new_tokens)
                client_ttft(client, url + path, body)
        for r in range(args.requests):
            order = list(range(len(trees)))[:: 1 if r % 2 == 0 else -1]
            for endpoint in ENDPOINTS:
                prompt = " ".join(rng.choice(WORDS) for _ in range(args.prompt_words))
                for i in order:
                    path, body = request(endpoint, models[i], prompt, f"{endpoint}-{r}", args.new_tokens)
                    ttfts[i][endpoint].append(client_ttft(client, urls[i] + path, body))
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{os.cpu_count()} CPUs, load average after the run {load}; stamps in {folder}")
    for i, tree in enumerate(trees):
        report(str(tree), ttfts[i], stage_durations(stamp_files[i]))


if __name__ == "__main__":
    main()
