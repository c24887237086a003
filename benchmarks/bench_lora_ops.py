"""LoRA op timings: every candidate of `lora_shrink` and `lora_expand` this machine runs, on the
embedded model's shapes (hidden 576; q/k/v 576/192/192; gate/up 1536 x 2; rank 16; slot 0 the
base model's plus 4 adapters), for a decode batch (8 rows, one per request) and a prefill batch
(128 rows in 8 segments). Each timing is the median of `--repeats` calls after warm-up, in
microseconds, on `--threads` torch threads; the load average is printed beside.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_lora_ops.py [--threads 1] [--repeats 200]
"""

from __future__ import annotations

import argparse
import functools
import importlib
import os
import statistics
import time
from collections.abc import Callable

import torch

from sglang.ops.lora import lora_expand, lora_shrink
from sglang.platforms.kernels.registry import family

HIDDEN, RANK, SLOTS = 576, 16, 5
CPU_FAMILIES = ("torch_native", "cpu_cpp")
PROJECTIONS = {"qkv": (576, 192, 192), "gate_up": (1536, 1536)}


def batch(rows: int) -> torch.Tensor:
    """`rows` token slots in 8 equal segments cycling over the slots (base model included)."""
    per = max(1, rows // 8)
    return torch.tensor([(i // per) % SLOTS for i in range(rows)], dtype=torch.long)


def median_us(call: Callable[[], object], repeats: int) -> float:
    for _ in range(5):
        call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def candidates(op: str) -> dict[str, Callable]:
    """The reference and the cpu platform's families' candidates of `op`."""
    found = {"reference": {"lora_shrink": lora_shrink, "lora_expand": lora_expand}[op]}
    for name in CPU_FAMILIES:
        for candidate in family(name).candidates:
            if candidate.op == op:
                module, attribute = candidate.qualname.split(":")
                found[name] = getattr(importlib.import_module(module), attribute)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    print(f"# threads {args.threads}, load average {os.getloadavg()[0]:.2f}")
    print("| op | projection | rows | candidate | us |")
    print("|---|---|---|---|---|")
    for rows in (8, 32, 128):
        slots = batch(rows)
        scaling = torch.cat([torch.zeros(1), torch.rand(SLOTS - 1, generator=gen) + 0.5])
        for projection, widths in PROJECTIONS.items():
            x = torch.randn(rows, HIDDEN, generator=gen)
            a = torch.randn(SLOTS, len(widths) * RANK, HIDDEN, generator=gen)
            b = torch.randn(SLOTS, sum(widths), RANK, generator=gen)
            h = torch.randn(rows, len(widths) * RANK, generator=gen)
            y = torch.randn(rows, sum(widths), generator=gen)
            for name, fn in candidates("lora_shrink").items():
                us = median_us(functools.partial(fn, x, a, slots), args.repeats)
                print(f"| lora_shrink | {projection} | {rows} | {name} | {us:.0f} |")
            for name, fn in candidates("lora_expand").items():
                us = median_us(functools.partial(fn, y, h, b, slots, scaling, widths), args.repeats)
                print(f"| lora_expand | {projection} | {rows} | {name} | {us:.0f} |")


if __name__ == "__main__":
    main()
