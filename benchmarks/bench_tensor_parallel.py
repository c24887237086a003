"""Decode-step time of the embedded model at tp=1 and tp=2 (gloo, one process per rank, on this
machine's cores), and the time rank 0 spends in collectives per decode step.

    python benchmarks/bench_tensor_parallel.py [--steps 32] [--batch 8] [--threads 1]

Each run prefills `batch` prompts of 64 tokens, then times `steps` decode steps (every sequence
one token) through `ModelRunner.forward`. Communication time is measured by timing every
all-reduce / all-gather call of rank 0's communicator (it includes waiting for the slower rank).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import tempfile
import time
from pathlib import Path

import torch

from sglang.ops.attention import AttentionInputs
from sglang.ops.step import StepInputs
from sglang.runtime.distributed.group import TPGroup, set_tp_group
from sglang.runtime.execution.model_runner import ModelRunner
from sglang.runtime.loader.model_loading import load_model, select
from sglang.runtime.server_args import ServerArgs

PROMPT = 64


class TimedComm:
    """Wraps a communicator, adding up the seconds its collectives take."""

    def __init__(self, comm) -> None:
        self.comm, self.seconds, self.calls = comm, 0.0, 0
        self.rank, self.world_size = comm.rank, comm.world_size

    def _timed(self, fn, *args, **kwargs):
        started = time.perf_counter()
        out = fn(*args, **kwargs)
        self.seconds += time.perf_counter() - started
        self.calls += 1
        return out

    def all_reduce(self, x):
        return self._timed(self.comm.all_reduce, x)

    def all_gather(self, x, dim=-1):
        return self._timed(self.comm.all_gather, x, dim)

    def broadcast_object(self, obj, src=0):
        return self.comm.broadcast_object(obj, src)


def measure(rank: int, world: int, rendezvous: str, steps: int, batch: int, threads: int, out: str) -> None:
    torch.set_num_threads(threads)
    args = ServerArgs(device="cpu", dtype="float32")
    platform = select(args)
    timed = None
    if world > 1:
        timed = TimedComm(platform.init_distributed(rank, world, f"file://{rendezvous}", 120))
        set_tp_group(TPGroup(rank, world, timed))
    loaded = load_model(args, platform)
    total = PROMPT + steps + 1
    runner = ModelRunner(loaded.model, platform, num_slots=batch * total + 1)
    slots = [torch.arange(1 + b * total, 1 + (b + 1) * total) for b in range(batch)]
    ids = torch.randint(0, loaded.config.vocab_size, (batch * PROMPT,), generator=torch.Generator().manual_seed(0))
    step = StepInputs(
        ids,
        torch.arange(PROMPT).repeat(batch),
        AttentionInputs((PROMPT,) * batch, (PROMPT,) * batch, torch.cat([s[:PROMPT] for s in slots])),
        torch.arange(PROMPT - 1, batch * PROMPT, PROMPT),
    )
    tokens = runner.forward(step).argmax(-1)
    elapsed = comm = 0.0
    for i in range(steps):
        n = PROMPT + i + 1
        step = StepInputs(
            tokens,
            torch.full((batch,), n - 1),
            AttentionInputs((n,) * batch, (1,) * batch, torch.cat([s[:n] for s in slots])),
            torch.arange(batch),
        )
        before = timed.seconds if timed else 0.0
        started = time.perf_counter()
        tokens = runner.forward(step).argmax(-1)
        if i >= 2:  # the first steps warm up
            elapsed += time.perf_counter() - started
            comm += (timed.seconds - before) if timed else 0.0
    if rank == 0:
        n = steps - 2
        per_step = {"step_ms": 1000 * elapsed / n, "comm_ms": 1000 * comm / n}
        if timed:
            per_step["collectives_per_step"] = timed.calls / (steps + 1)
        Path(out).write_text(json.dumps(per_step))


def run(world: int, steps: int, batch: int, threads: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = f"{tmp}/out.json"
        ctx = mp.get_context("spawn")
        procs = [
            ctx.Process(target=measure, args=(r, world, f"{tmp}/rdv", steps, batch, threads, out)) for r in range(world)
        ]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        return json.loads(Path(out).read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    a = parser.parse_args()
    tp1 = run(1, a.steps, a.batch, a.threads)
    tp1_all = run(1, a.steps, a.batch, 2 * a.threads)
    tp2 = run(2, a.steps, a.batch, a.threads)
    print(f"tp=1, {a.threads} thread(s):  {tp1['step_ms']:.1f} ms/decode step (batch {a.batch})")
    print(f"tp=1, {2 * a.threads} thread(s):  {tp1_all['step_ms']:.1f} ms/decode step")
    print(
        f"tp=2, {a.threads} thread(s) each: {tp2['step_ms']:.1f} ms/decode step, of which "
        f"{tp2['comm_ms']:.1f} ms in {tp2['collectives_per_step']:.0f} collectives (rank 0)"
    )
    print(f"tp=2 / tp=1 (same total threads): {tp2['step_ms'] / tp1_all['step_ms']:.2f}x the time per step")


if __name__ == "__main__":
    main()
