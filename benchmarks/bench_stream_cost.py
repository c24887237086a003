"""What streaming costs: CPU per streamed token in each process, and streamed against unstreamed.

On a 2-core machine the forward's OpenMP team holds both cores, so the CPU that the HTTP and
detokenizer processes spend on each streamed token is taken from the forward. This starts
`sglang serve` once per code tree given (default: this checkout), then in each round sends every
server one streamed and one unstreamed chat request of `--tokens` tokens (greedy, end of sequence
ignored), alternating which server goes first. Around each streamed request it reads the CPU
time of every thread of the server's processes (/proc, Linux), grouped by role: the HTTP
process's event loop and its ZeroMQ I/O thread, the detokenizer's loop and its I/O thread, the
scheduler (all its threads, OpenMP team included). Printed per tree: medians over the rounds of
CPU ms per streamed token by role, the client's time per output token, and streamed / unstreamed
tokens per second. With `--concurrency C` each round sends C such requests at once (the 32
concurrent row of bench_peers.py streams 32), and the CPU is divided by all their tokens.

    .venv/bin/python benchmarks/bench_stream_cost.py [--tokens 400] [--rounds 6] [--concurrency 1]
        [--tree /tmp/base --tree .]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import httpx
from bench_serving import our_server, served_model

from sglang.ci.servers.launcher import launched

CLOCK_TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds of each thread of `pid`, keyed `role/thread` (role from the process's name)."""
    role = _read(f"/proc/{pid}/comm") or "?"
    out: dict[str, float] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        stat = _read(f"/proc/{pid}/task/{tid}/stat")
        if stat is None:
            continue  # the thread ended
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        kind = "main" if tid == str(pid) else ("zmq io" if name.startswith("ZMQbg") else "other threads")
        key = f"{role}/{kind}"
        out[key] = out.get(key, 0.0) + (int(fields[11]) + int(fields[12])) * CLOCK_TICK_S
    return out


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def process_tree(pid: int) -> list[int]:
    children = _read(f"/proc/{pid}/task/{pid}/children") or ""
    return [pid] + [p for child in children.split() for p in process_tree(int(child))]


def tree_cpu(pid: int) -> dict[str, float]:
    total: dict[str, float] = defaultdict(float)
    for p in process_tree(pid):
        if os.path.exists(f"/proc/{p}/task"):
            for key, seconds in thread_cpu(p).items():
                role = "http" if p == pid else key.split("/")[0]
                total[f"{role}/{key.split('/')[1]}"] += seconds
    return total


def chat(client: httpx.Client, url: str, model: str, tokens: int, stream: bool) -> tuple[float, float]:
    """(seconds, mean seconds between streamed chunks; 0 unstreamed) of one greedy request."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Tell me a long story about a dragon."}],
        "max_tokens": tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": stream,
    }
    started = time.perf_counter()
    if not stream:
        client.post(url + "/v1/chat/completions", json=body).raise_for_status()
        return time.perf_counter() - started, 0.0
    arrivals = []
    with client.stream("POST", url + "/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if line.startswith("data: {"):
                arrivals.append(time.perf_counter())
    return time.perf_counter() - started, (arrivals[-1] - arrivals[0]) / (len(arrivals) - 1)


def chats(
    client: httpx.Client, url: str, model: str, tokens: int, stream: bool, concurrency: int
) -> tuple[float, float]:
    """(seconds until the last of `concurrency` requests sent at once ended, their median time
    between streamed chunks)."""
    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        results = list(pool.map(lambda _: chat(client, url, model, tokens, stream), range(concurrency)))
    return time.perf_counter() - started, statistics.median(gap for _, gap in results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--concurrency", type=int, default=1, help="Requests sent at once in each round.")
    parser.add_argument("--tree", action="append", type=Path, help="Code tree to serve from (repeatable).")
    parser.add_argument("--our-args", default="", help="Extra flags for `sglang serve`.")
    parser.add_argument("--log-dir", type=Path, default=Path(tempfile.gettempdir()))
    args = parser.parse_args()
    trees = [tree.resolve() for tree in args.tree or [Path(__file__).resolve().parent.parent]]
    cpu = [defaultdict(list) for _ in trees]
    tpot = [[] for _ in trees]
    ratio = [[] for _ in trees]
    with ExitStack() as stack:
        specs = [
            our_server(f"bench-stream-{i}", args.our_args.split(), {"PYTHONPATH": str(tree)})
            for i, tree in enumerate(trees)
        ]
        servers = [stack.enter_context(launched(spec, args.log_dir)) for spec in specs]
        client = stack.enter_context(httpx.Client(timeout=600, limits=httpx.Limits(max_connections=None)))
        models = [served_model(server.url) for server in servers]
        tokens = args.tokens * args.concurrency
        for server, model in zip(servers, models, strict=True):  # warm-up: every bucket it will use
            chats(client, server.url, model, 16, True, args.concurrency)
        for r in range(args.rounds):
            for i in list(range(len(trees)))[:: 1 if r % 2 == 0 else -1]:
                url, pid = servers[i].url, servers[i].process.pid
                before = tree_cpu(pid)
                streamed, gap = chats(client, url, models[i], args.tokens, True, args.concurrency)
                after = tree_cpu(pid)
                for key in after:
                    cpu[i][key].append((after[key] - before.get(key, 0.0)) / tokens * 1000)
                tpot[i].append(gap * 1000)
                unstreamed, _ = chats(client, url, models[i], args.tokens, False, args.concurrency)
                ratio[i].append(unstreamed / streamed)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"{os.cpu_count()} CPUs, load average after the run {load}; {args.concurrency} x {args.tokens} tokens, "
        f"{args.rounds} rounds"
    )
    for i, tree in enumerate(trees):
        print(f"\n## {tree}\n\n| per streamed token (median) | CPU ms |\n|---|---|")
        for key in sorted(cpu[i]):
            if (median := statistics.median(cpu[i][key])) > 0:  # threads that never ran are left out
                print(f"| {key} | {median:.3f} |")
        print(f"| client time per output token, ms | {statistics.median(tpot[i]):.2f} |")
        print(f"| streamed / unstreamed tokens per second | {statistics.median(ratio[i]):.3f} |")


if __name__ == "__main__":
    main()
