"""The cpu platform: always available; low-bit linear (cpu_quant) and torch_native kernels on the host."""

from __future__ import annotations

import os
from functools import cached_property

import torch

from sglang.ops.binding import resolve
from sglang.platforms.base import Availability, Capabilities, Platform
from sglang.platforms.device_runtime import DeviceRuntime

THREADS_ENV = "SGLANG_CPU_THREADS"
COMPILE_ENV = "SGLANG_CPU_COMPILE_DECODE"


class CpuPlatform(Platform):
    name = "cpu"
    device_type = "cpu"
    dispatch_key = "CPU"
    capabilities = Capabilities(
        dtypes=frozenset({torch.float32, torch.bfloat16, torch.float16}),
        default_dtype=torch.float32,
    )
    kernel_families = ("cpu_quant", "torch_native")
    distributed_backend = "gloo"

    @cached_property
    def runtime(self) -> DeviceRuntime:
        """With `$SGLANG_CPU_COMPILE_DECODE=1`, decode buckets are compiled (inductor) on first use;
        off by default: a cold compile takes minutes on a small machine (cached afterwards)."""
        if os.environ.get(COMPILE_ENV, "").lower() in ("1", "true", "yes"):
            return resolve("sglang.platforms.cpu.runtime:CompiledDecodeRuntime")()
        return DeviceRuntime()

    @classmethod
    def availability(cls) -> Availability:
        return Availability.yes()

    def configure_host_threads(self, threads: int | None) -> int:
        """The argument, else `$SGLANG_CPU_THREADS`, else torch's default. On a busy machine
        fewer threads can be faster, so it is configurable."""
        return super().configure_host_threads(threads or int(os.environ.get(THREADS_ENV, "0")))
