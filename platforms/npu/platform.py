"""The npu platform: Huawei Ascend NPUs through the `torch_npu` extension and HCCL.

`torch_npu` claims torch's PrivateUse1 dispatch key under the name `npu` when imported, so it
is imported before any `npu` device is named. Kernels: torch_npu's fused operators, then
torch_native.
"""

from __future__ import annotations

import importlib.util

import torch

from sglang.platforms.base import Availability, Capabilities, Platform, StepExecution, StepMode
from sglang.platforms.device_runtime import visible_devices_hint


class NpuPlatform(Platform):
    name = "npu"
    device_type = "npu"
    dispatch_key = "PrivateUse1"
    capabilities = Capabilities(
        dtypes=frozenset({torch.float32, torch.bfloat16, torch.float16}),
        default_dtype=torch.bfloat16,
        steps=StepExecution(StepMode.CAPTURED),
    )
    kernel_families = ("torch_npu", "torch_native")
    runtime_class = "sglang.platforms.npu.runtime:NpuRuntime"
    visible_devices_env = "ASCEND_RT_VISIBLE_DEVICES"
    distributed_backend = "hccl"

    @classmethod
    def availability(cls) -> Availability:
        if importlib.util.find_spec("torch_npu") is None:
            return Availability.no("torch_npu is not installed")
        try:
            import torch_npu  # noqa: F401
        except Exception as exc:  # a missing CANN toolkit surfaces as OSError/RuntimeError, not ImportError
            return Availability.no(f"torch_npu failed to import: {exc}")
        if not torch.npu.is_available():
            return Availability.no("no Ascend NPU visible" + visible_devices_hint(cls.visible_devices_env))
        return Availability.yes()

    def device(self, index: int = 0) -> torch.device:
        import torch_npu  # noqa: F401  (registers the `npu` device type)

        return super().device(index)
