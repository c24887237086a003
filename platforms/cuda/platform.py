"""The cuda platform: NVIDIA GPUs through a CUDA build of torch.

Kernels: flashinfer (where importable), the shared Triton family, then torch_native. A ROCm
build of torch also reports CUDA devices through `torch.cuda`; `torch.version.hip` tells it
apart, so it is checked first.
"""

from __future__ import annotations

import torch

from sglang.platforms.base import Availability, Capabilities, Platform, StepExecution, StepMode
from sglang.platforms.device_runtime import visible_devices_hint
from sglang.platforms.kernels.triton.tuning import TritonTuning


class CudaPlatform(Platform):
    name = "cuda"
    device_type = "cuda"
    dispatch_key = "CUDA"
    capabilities = Capabilities(
        dtypes=frozenset({torch.float32, torch.bfloat16, torch.float16}),
        default_dtype=torch.bfloat16,
        steps=StepExecution(StepMode.CAPTURED),
    )
    kernel_families = ("flashinfer", "triton", "torch_native")
    kernel_tuning = {"triton": TritonTuning(num_warps=4, num_stages=2)}
    runtime_class = "sglang.platforms.cuda.runtime:CudaRuntime"
    visible_devices_env = "CUDA_VISIBLE_DEVICES"
    distributed_backend = "nccl"
    profiler_activity = "CUDA"

    @classmethod
    def availability(cls) -> Availability:
        if getattr(torch.version, "hip", None) is not None:
            return Availability.no("torch is a ROCm (HIP) build: use --device rocm")
        if torch.version.cuda is None:
            return Availability.no("torch was built without CUDA")
        if not torch.cuda.is_available():
            return Availability.no("no CUDA device visible" + visible_devices_hint(cls.visible_devices_env))
        return Availability.yes()

    def device_capability(self) -> tuple[int, int] | None:
        return tuple(torch.cuda.get_device_capability())
