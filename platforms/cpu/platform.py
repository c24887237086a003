"""The cpu platform: always available; torch SDPA attention and sparse MoE on the host."""

from __future__ import annotations

import os

import torch

from sglang.platforms.base import Availability, Capabilities, Platform

THREADS_ENV = "SGLANG_CPU_THREADS"


class CpuPlatform(Platform):
    name = "cpu"
    device_type = "cpu"
    dispatch_key = "CPU"
    capabilities = Capabilities(
        dtypes=frozenset({torch.float32, torch.bfloat16, torch.float16}),
        torch_compile=True,
        mixed_prefill_decode=True,
        distributed_backend="gloo",
        default_dtype=torch.float32,
    )
    native_ops = {
        "attention_backend": "sglang.platforms.cpu.attention:CpuSdpaAttention",
        "rms_norm": "sglang.platforms.cpu.kernels:rms_norm",
        "fused_add_rms_norm": "sglang.platforms.cpu.kernels:fused_add_rms_norm",
        "moe_experts": "sglang.platforms.cpu.kernels:moe_experts",
    }

    @classmethod
    def availability(cls) -> Availability:
        return Availability.yes()

    def configure_host_threads(self, threads: int | None) -> int:
        """The argument, else `$SGLANG_CPU_THREADS`, else torch's default. On a busy machine
        fewer threads can be faster (STACK-FACTS.md), so it is configurable."""
        return super().configure_host_threads(threads or int(os.environ.get(THREADS_ENV, "0")))
