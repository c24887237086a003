"""Windowed decode with sinks: the cpu_cpp family's in-place kernel vs torch_native's SDPA path.

One decode step of one gpt-oss-style layer (plan + forward: 64 query heads, 8 KV heads, head dim
64, a 128-token sliding window, with and without attention sinks), float32, for a batch of rows
of equal context over a shuffled pool. The kernel reads only each row's last 128 slots;
torch_native gathers the whole context into a padded block and masks it (with sinks, which SDPA
lacks, it runs the reference's per-sequence softmax). Peers alternate within each repeat; prints
the median time of each per context length and the ratio. Both outputs are checked equal first.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_window_decode.py [--batch 8] [--contexts 512 2048 8192]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from sglang.ops.attention import AttentionInputs, AttentionLayer
from sglang.platforms.kernels.cpu_cpp.attention import PoolDecodeAttention
from sglang.platforms.kernels.torch_native.attention import SdpaAttention

HEADS, KV_HEADS, DIM, WINDOW = 64, 8, 64, 128


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--contexts", type=int, nargs="+", default=[512, 2048, 8192])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    print(f"torch threads {torch.get_num_threads()}, load {os.getloadavg()[0]:.1f}")
    gen = torch.Generator().manual_seed(0)
    sinks = torch.randn(HEADS, generator=gen)
    backends = {
        name: cls(HEADS, KV_HEADS, DIM, torch.float32, torch.device("cpu"))
        for name, cls in (("torch_native", SdpaAttention), ("cpu_cpp", PoolDecodeAttention))
    }
    for with_sinks in (False, True):
        layer = AttentionLayer(layer_id=0, scale=DIM**-0.5, sliding_window=WINDOW, sinks=with_sinks)
        extra = {"sinks": sinks} if with_sinks else {}
        for context in args.contexts:
            slots_total = args.batch * context + 64
            pool = torch.randn(2, slots_total, KV_HEADS, DIM, generator=gen)
            slots = torch.randperm(slots_total, generator=gen)[: args.batch * context]
            inputs = AttentionInputs((context,) * args.batch, (1,) * args.batch, slots)
            q = torch.randn(args.batch, HEADS, DIM, generator=gen)
            k, v = (torch.randn(args.batch, KV_HEADS, DIM, generator=gen) for _ in range(2))
            times: dict[str, list[float]] = {name: [] for name in backends}
            outputs = {}
            for _ in range(args.repeats):
                for name, backend in backends.items():
                    started = time.perf_counter()
                    outputs[name], _ = backend.forward(q, k, v, pool, backend.plan(inputs), layer, **extra)
                    times[name].append(time.perf_counter() - started)
            torch.testing.assert_close(outputs["cpu_cpp"], outputs["torch_native"], atol=1e-4, rtol=1e-4)
            native, ours = (statistics.median(times[name][1:]) for name in ("torch_native", "cpu_cpp"))
            print(
                f"{'sinks' if with_sinks else 'no sinks'}, batch {args.batch} x context {context}: "
                f"torch_native {native * 1e3:.2f} ms, cpu_cpp {ours * 1e3:.2f} ms ({native / ours:.1f}x)"
            )


if __name__ == "__main__":
    main()
