"""MLA decode op benchmark: the cpu_cpp family's in-place latent decode vs torch_native's SDPA.

One decode step of one layer (plan + forward, the absorbed form in both) for a batch of rows of
equal context over a shuffled latent pool, at DeepSeek-V2-Lite's attention shapes (16 heads,
kv_lora_rank 512, rope dim 64, nope dim 128, v dim 128), float32. Prints the median time of each
per context length and the ratio. Both outputs are checked equal first.

    .venv/bin/python benchmarks/bench_mla_decode.py [--batch 8] [--contexts 256 1024 4096]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from sglang.ops.attention import AttentionInputs, AttentionLayer
from sglang.platforms.kernels.cpu_cpp.mla import PoolDecodeMLA
from sglang.platforms.kernels.torch_native.mla import AbsorbedMLA

HEADS, RANK, ROPE, NOPE, V_DIM = 16, 512, 64, 128, 128


def step_time(backend_cls: type, inputs: AttentionInputs, tensors: tuple, repeats: int) -> tuple[float, torch.Tensor]:
    """Median seconds of one plan + forward, and the output."""
    backend = backend_cls(HEADS, RANK, ROPE, torch.float32, torch.device("cpu"))
    layer = AttentionLayer(layer_id=0, scale=(NOPE + ROPE) ** -0.5)
    q_nope, q_pe, latent, k_pe, w_kc, w_vc, pool = tensors
    times, out = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        out, _ = backend.forward(q_nope, q_pe, latent, k_pe, w_kc, w_vc, pool, backend.plan(inputs), layer)
        times.append(time.perf_counter() - started)
    return statistics.median(times[1:]), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--contexts", type=int, nargs="+", default=[256, 1024, 4096])
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    print(f"torch threads {torch.get_num_threads()}, load {os.getloadavg()[0]:.1f}")
    gen = torch.Generator().manual_seed(0)
    for context in args.contexts:
        slots_total = args.batch * context + 64
        pool = torch.randn(slots_total, RANK + ROPE, generator=gen)
        slots = torch.randperm(slots_total, generator=gen)[: args.batch * context]
        inputs = AttentionInputs((context,) * args.batch, (1,) * args.batch, slots)
        tensors = (
            torch.randn(args.batch, HEADS, NOPE, generator=gen),
            torch.randn(args.batch, HEADS, ROPE, generator=gen),
            torch.randn(args.batch, RANK, generator=gen),
            torch.randn(args.batch, ROPE, generator=gen),
            torch.randn(HEADS, NOPE, RANK, generator=gen) * RANK**-0.5,
            torch.randn(HEADS, V_DIM, RANK, generator=gen) * RANK**-0.5,
            pool,
        )
        native, expected = step_time(AbsorbedMLA, inputs, tensors, args.repeats)
        ours, actual = step_time(PoolDecodeMLA, inputs, tensors, args.repeats)
        torch.testing.assert_close(actual, expected, atol=1e-4, rtol=1e-4)
        print(
            f"batch {args.batch} x context {context}: torch_native {native * 1e3:.2f} ms, "
            f"cpu_cpp {ours * 1e3:.2f} ms ({native / ours:.2f}x)"
        )


if __name__ == "__main__":
    main()
