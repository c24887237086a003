"""The rocm platform: AMD GPUs through a ROCm (HIP) build of torch.

A HIP build serves its devices through torch's `cuda` device type and `torch.cuda` API, and
RCCL through the `nccl` process-group backend (`init_process_group("rccl")` would fail), so
those are the names declared here. Kernels: AMD's aiter (where importable), the shared Triton
family (with an AMD occupancy hint), then torch_native.
"""

from __future__ import annotations

import torch

from sglang.platforms.base import Availability, Capabilities, Platform, StepExecution, StepMode
from sglang.platforms.device_runtime import visible_devices_hint
from sglang.platforms.kernels.triton.tuning import TritonTuning


class RocmPlatform(Platform):
    name = "rocm"
    device_type = "cuda"
    dispatch_key = "CUDA"
    capabilities = Capabilities(
        dtypes=frozenset({torch.float32, torch.bfloat16, torch.float16}),
        default_dtype=torch.bfloat16,
        steps=StepExecution(StepMode.CAPTURED),
    )
    kernel_families = ("aiter", "triton", "torch_native")
    kernel_tuning = {"triton": TritonTuning(num_warps=4, num_stages=2, waves_per_eu=2)}
    runtime_class = "sglang.platforms.cuda.runtime:CudaRuntime"
    visible_devices_env = "HIP_VISIBLE_DEVICES"
    distributed_backend = "nccl"
    profiler_activity = "CUDA"

    def device_arch(self) -> str | None:
        """`gfx942` of a `gcnArchName` such as `gfx942:sramecc+:xnack-` (the target features dropped)."""
        return torch.cuda.get_device_properties(self.device_index).gcnArchName.split(":")[0]

    @classmethod
    def availability(cls) -> Availability:
        if getattr(torch.version, "hip", None) is None:
            return Availability.no("torch was built without HIP")
        if not torch.cuda.is_available():
            return Availability.no("no ROCm (HIP) device visible" + visible_devices_hint(cls.visible_devices_env))
        return Availability.yes()
