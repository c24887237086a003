"""Decode over a float32 KV pool against a bfloat16 one (`--kv-cache-dtype bf16`), the embedded model.

One row decodes after a context of each `--contexts` length, through the server's own path (the
cpu_cpp family, a captured one-row bucket, `--threads` torch threads): the median time of a decode
step per pool, the two pools alternating within each repeat, and what one token's K/V take in each.
A step reads every cached token's K and V rows of every layer, so at long contexts the pool's bytes
are a growing share of the step; the bfloat16 pool reads half of them. Both pools' greedy tokens
over a real prompt are printed side by side first (the bfloat16 rounding of K and V only).

    .venv/bin/python benchmarks/bench_kv_dtype.py [--contexts 128 1024 4096] [--repeats 5] [--steps 32]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from sglang.ops.attention import AttentionInputs
from sglang.ops.binding import install
from sglang.ops.buckets import BucketPolicy
from sglang.ops.step import StepInputs
from sglang.runtime.execution.model_runner import ModelRunner, attention_backend_for
from sglang.runtime.loader.model_loading import LoadedModel, load_model
from sglang.runtime.server_args import ServerArgs

POOLS = ("auto", "bf16")


def runner_for(loaded: LoadedModel, pool: str, slots: int) -> ModelRunner:
    backend = attention_backend_for(loaded.model, loaded.platform, kv_cache_dtype=pool)
    return ModelRunner(loaded.model, loaded.platform, slots, backend, graph_buckets=BucketPolicy((1,)))


def step(ids: list[int], context: int, slots: torch.Tensor) -> StepInputs:
    """The step that appends `ids` after `context - len(ids)` cached tokens (one row)."""
    new = len(ids)
    attention = AttentionInputs((context,), (new,), slots[:context])
    return StepInputs(torch.tensor(ids), torch.arange(context - new, context), attention, torch.tensor([new - 1]))


def greedy(runner: ModelRunner, prompt: list[int], tokens: int, slots: torch.Tensor) -> list[int]:
    out = [int(runner.forward(step(prompt, len(prompt), slots))[0].argmax())]
    while len(out) < tokens:
        out.append(int(runner.forward(step(out[-1:], len(prompt) + len(out), slots))[0].argmax()))
    return out


def decode_ms(runner: ModelRunner, context: int, steps: int, slots: torch.Tensor) -> float:
    """Median milliseconds of a decode step after `context` tokens (their K/V whatever the pool
    holds: `main` fills it, as prefills would, so that every row read is memory of its own)."""
    times = []
    for i in range(steps):
        started = time.perf_counter()
        runner.forward(step([5], context + i, slots))
        times.append(time.perf_counter() - started)
    return 1e3 * statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--contexts", type=int, nargs="+", default=[128, 1024, 4096])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=32, help="Decode steps timed per context and repeat.")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    loaded = load_model(ServerArgs(device="cpu"))
    install(loaded.op_table, loaded.platform.kernel_tuning)
    slots_needed = max(args.contexts) + args.steps + 2
    slots = torch.arange(1, slots_needed + 1)
    runners = {pool: runner_for(loaded, pool, slots_needed + 1) for pool in POOLS}
    for runner in runners.values():
        for buffer in runner.kv_buffers:  # never-written pages would all read the one zero page
            buffer.normal_()
    tokenizer = loaded.load_tokenizer()
    question = [{"role": "user", "content": "Write one paragraph about the sea."}]
    prompt = tokenizer.encode(tokenizer.apply_chat_template(question, tokenize=False, add_generation_prompt=True))
    for pool, runner in runners.items():
        print(f"{pool:>5}: {tokenizer.decode(greedy(runner, prompt, 48, slots))!r}")
    print(f"\ntorch threads {args.threads}, load {os.getloadavg()[0]:.2f} (before)")
    print("| context | float32 pool, ms/step | bfloat16 pool, ms/step | float32 / bfloat16 |\n|---|---|---|---|")
    for context in args.contexts:
        times: dict[str, list[float]] = {pool: [] for pool in POOLS}
        for _ in range(args.repeats):
            for pool in POOLS:
                times[pool].append(decode_ms(runners[pool], context, args.steps, slots))
        full, half = (statistics.median(times[pool]) for pool in POOLS)
        print(f"| {context} | {full:.2f} | {half:.2f} | {full / half:.2f} |")
    for pool, runner in runners.items():
        per_token = runner.attn_backend.kv_bytes_per_token() * loaded.model.config.num_layers
        print(f"{pool}: {runner.kv_buffers[0].dtype}, {per_token / 1024:.1f} KiB of K/V per token")
    print(f"load {os.getloadavg()[0]:.2f} (after)")


if __name__ == "__main__":
    main()
