"""Select benchmark: multiple-choice questions through `sgl.select` with `run_batch`, on our server.

Every question shares one few-shot prefix (about 600 tokens), then asks its own question and
selects one of four answer letters. Two timed runs over the same questions, the server's prefix
cache flushed (`/flush_cache`) before each:

- cold: `run_batch` straight away (the frontend's automatic pre-caching turned off), so the first
  wave of concurrent programs all prefill the shared prefix before any of them has cached it;
- warm: the frontend's prefix warm-up first (`program.cache(backend)`: trace the program, prefill
  its constant prefix once with `cache_prefix`), then the same `run_batch`. Its time includes the
  warm-up request.

Printed: both times, their ratio (cold / warm), accuracy, and the prompt tokens the server
prefilled vs served from its cache in each run (from `/get_server_info`). A short untimed run
comes first, so neither timed run pays for first-request costs. Absolute times move with the
machine's load (printed); the ratio much less.

    .venv/bin/python benchmarks/bench_select.py                       # starts a cpu server of ours
    .venv/bin/python benchmarks/bench_select.py --base-url http://127.0.0.1:30000 [--api-key KEY]
"""

from __future__ import annotations

import argparse
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sglang as sgl
from sglang.frontend.config import global_config

LETTERS = ("A", "B", "C", "D")
NUM_SHOTS = 16


@dataclass(frozen=True)
class Question:
    text: str
    options: tuple[str, ...]
    answer: str  # the letter


def make_question(rng: random.Random) -> Question:
    """An addition of two 2-digit numbers with four distinct numeric options."""
    a, b = rng.randint(10, 60), rng.randint(10, 60)
    total = a + b
    options = {total}
    while len(options) < len(LETTERS):
        options.add(total + rng.choice((-11, -10, -2, -1, 1, 2, 9, 10)))
    ordered = rng.sample(sorted(options), len(LETTERS))
    return Question(f"What is {a} + {b}?", tuple(map(str, ordered)), LETTERS[ordered.index(total)])


def render(question: Question, with_answer: bool) -> str:
    lines = [f"Question: {question.text}", *(f"{k}. {o}" for k, o in zip(LETTERS, question.options))]
    return "\n".join(lines) + "\nAnswer:" + (f" {question.answer}\n\n" if with_answer else "")


FEW_SHOT_PREFIX = "The following are multiple choice questions about arithmetic, with answers.\n\n" + "".join(
    render(make_question(random.Random(1000 + i)), with_answer=True) for i in range(NUM_SHOTS)
)


@sgl.function
def multiple_choice(s, question, options):
    s += FEW_SHOT_PREFIX
    s += "Question: " + question + "\n"
    for letter, option in zip(LETTERS, options):
        s += letter + ". " + option + "\n"
    s += "Answer:" + sgl.select("answer", [" " + letter for letter in LETTERS])


@dataclass
class RunResult:
    seconds: float
    accuracy: float
    answers: list[str]
    prefilled_tokens: int
    cached_tokens: int


def server_counters(backend: sgl.RuntimeEndpoint) -> tuple[int, int]:
    """(prompt tokens prefilled, prompt tokens served from the cache) so far, from /get_server_info."""
    info = backend.get_server_info()
    return int(info.get("prompt_tokens", 0)), int(info.get("cached_tokens", 0))


def timed_run(
    backend: sgl.RuntimeEndpoint,
    questions: list[Question],
    num_threads: int | str,
    warm_up: Callable[[], Any] | None,
) -> RunResult:
    backend.flush_cache()
    before = server_counters(backend)
    batch = [{"question": q.text, "options": list(q.options)} for q in questions]
    started = time.perf_counter()
    if warm_up is not None:
        warm_up()
    states = multiple_choice.run_batch(batch, backend=backend, num_threads=num_threads)
    answers = [state["answer"].strip() for state in states]
    seconds = time.perf_counter() - started
    after = server_counters(backend)
    correct = sum(a == q.answer for a, q in zip(answers, questions, strict=True))
    return RunResult(seconds, correct / len(questions), answers, after[0] - before[0], after[1] - before[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base-url", help="a running server of ours; default: start one (cpu)")
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--num-questions", type=int, default=200)
    parser.add_argument("--num-threads", default="auto", help='run_batch threads ("auto": the frontend default)')
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu", help="device of the server this script starts")
    parser.add_argument("--max-total-tokens", type=int, default=16384, help="KV cache of the server it starts")
    args = parser.parse_args()
    num_threads: int | str = args.num_threads if args.num_threads == "auto" else int(args.num_threads)

    rng = random.Random(args.seed)
    questions = [make_question(rng) for _ in range(args.num_questions)]
    runtime = None
    if args.base_url:
        backend = sgl.RuntimeEndpoint(args.base_url, api_key=args.api_key)
    else:
        extra = {"cpu_threads": int(os.environ.get("SGLANG_CPU_THREADS") or 1)} if args.device == "cpu" else {}
        print(f"starting a {args.device} server of ours ...", flush=True)
        runtime = sgl.Runtime(
            device=args.device,
            max_total_tokens=args.max_total_tokens,
            log_level="warning",
            launch_timeout=600,
            **extra,
        )
        backend = runtime.endpoint
    saved = global_config.enable_precache_with_tracing
    global_config.enable_precache_with_tracing = False  # the warm-up is explicit, in the warm run only
    try:
        prefix_tokens = backend.http.post(
            "/generate", {"text": FEW_SHOT_PREFIX, "sampling_params": {"max_new_tokens": 0}}
        )["meta_info"]["prompt_tokens"]
        timed_run(backend, questions[:4], num_threads, None)  # untimed: first-request costs
        cold = timed_run(backend, questions, num_threads, None)
        warm = timed_run(backend, questions, num_threads, lambda: multiple_choice.cache(backend))
    finally:
        global_config.enable_precache_with_tracing = saved
        if runtime is not None:
            runtime.shutdown()

    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    shape = f"{len(questions)} questions x {len(LETTERS)} choices, shared prefix {prefix_tokens} tokens"
    print(f"select benchmark: {shape}")
    print(f"server: {args.base_url or 'started here (' + args.device + ')'}; run_batch threads: {num_threads}")
    print(f"load average (1/5/15 min): {load}")
    print(f"{'run':<34}{'seconds':>9}{'accuracy':>10}{'prefilled tok':>15}{'cached tok':>12}")
    for name, result in (("cold (no warm-up)", cold), ("warm (cache_prefix, then batch)", warm)):
        print(
            f"{name:<34}{result.seconds:>9.2f}{result.accuracy:>10.2f}"
            f"{result.prefilled_tokens:>15}{result.cached_tokens:>12}"
        )
    print(f"ratio cold / warm: {cold.seconds / warm.seconds:.2f}x")
    same = sum(a == b for a, b in zip(cold.answers, warm.answers, strict=True))
    print(f"same answer in both runs: {same}/{len(questions)}")


if __name__ == "__main__":
    main()
