"""The weight-streaming bound of single-stream decode: how fast batch-1 decode could go if each
token cost nothing but reading the model's weights once from memory.

On a CPU, a batch-1 decode step reads every weight it multiplies by, once, and does little
arithmetic per byte, so its speed is bounded by memory bandwidth over the bytes a token reads.
The bytes are the GGUF's tensors that a step reads: every tensor but the token embedding (a
step gathers one row of it), plus the embedding again where the model ties it to the output
head. The bandwidth is that of a float sum over a buffer far larger than the caches, on the
servers' thread count, the best of a few passes; it is measured in the minute it is used, since
it moves with the machine's load.
"""

from __future__ import annotations

import time
from pathlib import Path

import gguf
import torch

EMBEDDING = "token_embd.weight"
OUTPUT = "output.weight"
BUFFER_BYTES = 1 << 30
PASSES = 5


def weight_bytes_per_token(path: Path) -> int:
    """Bytes of the GGUF's tensors that one decode step reads."""
    sizes = {tensor.name: int(tensor.n_bytes) for tensor in gguf.GGUFReader(str(path)).tensors}
    total = sum(sizes.values())
    return total if OUTPUT not in sizes else total - sizes.get(EMBEDDING, 0)


def read_bandwidth(threads: int) -> float:
    """Bytes per second a float sum reads on `threads` threads (best of `PASSES`)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        buffer = torch.ones(BUFFER_BYTES // 4, dtype=torch.float32)
        best = float("inf")
        for _ in range(PASSES):
            started = time.perf_counter()
            buffer.sum()
            best = min(best, time.perf_counter() - started)
        return BUFFER_BYTES / best
    finally:
        torch.set_num_threads(previous)


def bound_rows(path: Path, threads: int, single_stream: float) -> dict[str, float]:
    """bench_peers' rows: the bound in the minute it is measured and `single_stream`'s share of it."""
    bandwidth = read_bandwidth(threads)
    bound = bandwidth / weight_bytes_per_token(path)
    return {
        f"read bandwidth, {threads} threads, GB/s": bandwidth / 1e9,
        "weight-streaming bound, tokens/s": bound,
        "single-stream decode, % of the bound": 100 * single_stream / bound,
    }
