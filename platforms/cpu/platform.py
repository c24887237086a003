"""The cpu platform: always available; the C++ kernels (cpu_cpp) and torch_native on the host."""

from __future__ import annotations

import os
from functools import cached_property

import torch

from sglang.ops.binding import resolve
from sglang.platforms.base import Availability, Capabilities, Platform, StepExecution, StepMode
from sglang.platforms.device_runtime import DeviceRuntime

THREADS_ENV = "SGLANG_CPU_THREADS"
COMPILE_ENV = "SGLANG_CPU_COMPILE_DECODE"
DEFAULT_GRAPH_MAX_BATCH = 32
"""Decode batches up to this many rows replay a captured step by default. Python's share of a
step, which capture removes, shrinks as the batch grows, but at 32 rows a taped step was still
~4% faster than an eager one; each bucket costs a capture on first use (~0.2 s at 32 rows) and
its own logits, its other buffers being shared (figures: benchmarks/README.md, "Step tapes
share one arena")."""


class CpuPlatform(Platform):
    name = "cpu"
    device_type = "cpu"
    dispatch_key = "CPU"
    capabilities = Capabilities(
        dtypes=frozenset({torch.float32, torch.bfloat16, torch.float16}),
        default_dtype=torch.float32,
        steps=StepExecution(
            StepMode.CAPTURED,
            exact_buckets=True,
            default_max_batch=DEFAULT_GRAPH_MAX_BATCH,
            static_collectives=False,
        ),
    )
    kernel_families = ("cpu_cpp", "torch_native")
    distributed_backend = "gloo"

    @cached_property
    def runtime(self) -> DeviceRuntime:
        """Decode buckets are taped on first use (`TapedDecodeRuntime`; traced where a tape cannot
        replay the step); with `$SGLANG_CPU_COMPILE_DECODE=1` they are compiled by inductor
        instead, which takes minutes cold on a small machine (cached afterwards)."""
        if os.environ.get(COMPILE_ENV, "").lower() in ("1", "true", "yes"):
            return resolve("sglang.platforms.cpu.runtime:CompiledDecodeRuntime")()
        return resolve("sglang.platforms.cpu.runtime:TapedDecodeRuntime")()

    @classmethod
    def availability(cls) -> Availability:
        return Availability.yes()

    def configure_host_threads(self, threads: int | None) -> int:
        """The argument, else `$SGLANG_CPU_THREADS`, else torch's default. On a busy machine
        fewer threads can be faster, so it is configurable."""
        return super().configure_host_threads(threads or int(os.environ.get(THREADS_ENV, "0")))
