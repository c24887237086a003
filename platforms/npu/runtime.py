"""The npu device runtime: `torch.npu` (installed by `torch_npu`) sync, memory and cache calls."""

from __future__ import annotations

from types import ModuleType

from sglang.platforms.device_runtime import TorchDeviceRuntime


class NpuRuntime(TorchDeviceRuntime):
    """Graph capture is left out until NPU graphs are wired and tested."""

    module_name = "npu"

    def device_module(self) -> ModuleType:
        import torch_npu  # noqa: F401  (importing it is what installs `torch.npu`)

        return super().device_module()
