"""The xpu platform: Intel GPUs through torch's built-in XPU backend.

Native kernels (intel-extension-for-pytorch, Triton's XPU backend) come later; until then every
compute op runs its torch reference on the GPU, and the device runtime is native.
"""

from __future__ import annotations

import torch

from sglang.platforms.base import Availability, Capabilities, Platform
from sglang.platforms.cuda.platform import visible_devices_hint


class XpuPlatform(Platform):
    name = "xpu"
    device_type = "xpu"
    dispatch_key = "XPU"
    capabilities = Capabilities(
        dtypes=frozenset({torch.float32, torch.bfloat16, torch.float16}),
        page_sizes=None,
        graph_capture=False,
        torch_compile=True,
        triton=True,
        custom_all_reduce=False,
        overlap_scheduling=True,
        mixed_prefill_decode=True,
        distributed_backend="xccl",
        default_dtype=torch.bfloat16,
    )
    native_ops = {"device_runtime": "sglang.platforms.xpu.runtime:XpuRuntime"}

    @classmethod
    def availability(cls) -> Availability:
        xpu = getattr(torch, "xpu", None)
        # `_is_compiled` tells "built without XPU" apart from "no device"; torch < 2.4 has no torch.xpu.
        if xpu is None or not xpu._is_compiled():
            return Availability.no("torch was built without XPU")
        if not xpu.is_available():
            return Availability.no("no XPU device visible" + visible_devices_hint("ZE_AFFINITY_MASK"))
        return Availability.yes()
