"""The xpu platform: Intel GPUs through torch's built-in XPU backend.

Kernels: Intel's IPEX kernels (the ipex family) where importable (its paged attention only for
fp16/bf16 on pools of 16- or 32-token pages); then the shared Triton family, which needs Intel's
Triton build (the PyPI `triton` wheel ships only the nvidia and amd backends; Intel's build adds
`triton.backends.intel`); then torch_native.
"""

from __future__ import annotations

import torch

from sglang.ops.selection import Requirements
from sglang.platforms.base import Availability, Capabilities, Platform
from sglang.platforms.device_runtime import visible_devices_hint
from sglang.platforms.kernels.triton.tuning import TritonTuning


class XpuPlatform(Platform):
    name = "xpu"
    device_type = "xpu"
    dispatch_key = "XPU"
    capabilities = Capabilities(
        dtypes=frozenset({torch.float32, torch.bfloat16, torch.float16}),
        default_dtype=torch.bfloat16,
    )
    kernel_families = ("ipex", "triton", "torch_native")
    family_requirements = {"triton": Requirements(packages=("triton.backends.intel",))}
    kernel_tuning = {"triton": TritonTuning(num_warps=8, num_stages=2)}
    runtime_class = "sglang.platforms.xpu.runtime:XpuRuntime"
    visible_devices_env = "ZE_AFFINITY_MASK"
    distributed_backend = "xccl"
    profiler_activity = "XPU"

    @classmethod
    def availability(cls) -> Availability:
        xpu = getattr(torch, "xpu", None)
        # `_is_compiled` tells "built without XPU" apart from "no device"; torch < 2.4 has no torch.xpu.
        if xpu is None or not xpu._is_compiled():
            return Availability.no("torch was built without XPU")
        if not xpu.is_available():
            return Availability.no("no XPU device visible" + visible_devices_hint(cls.visible_devices_env))
        return Availability.yes()
