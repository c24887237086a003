"""The xpu device runtime: `torch.xpu` sync, memory and cache calls; no graph capture."""

from __future__ import annotations

from sglang.platforms.device_runtime import TorchDeviceRuntime


class XpuRuntime(TorchDeviceRuntime):
    """Graph capture is left out: XPU graphs are new in torch and unproven here."""

    module_name = "xpu"
