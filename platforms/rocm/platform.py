"""The rocm platform: AMD GPUs through a ROCm (HIP) build of torch.

A HIP build serves its devices through torch's `cuda` device type and `torch.cuda` API, and
RCCL through the `nccl` process-group backend, so those are the names declared here. Native
kernels (aiter where importable, else the shared Triton kernels) come later.
"""

from __future__ import annotations

import torch

from sglang.platforms.base import Availability, Capabilities, Platform
from sglang.platforms.cuda.platform import visible_devices_hint


class RocmPlatform(Platform):
    name = "rocm"
    device_type = "cuda"
    dispatch_key = "CUDA"
    capabilities = Capabilities(
        dtypes=frozenset({torch.float32, torch.bfloat16, torch.float16}),
        page_sizes=None,
        graph_capture=True,
        torch_compile=True,
        triton=True,
        custom_all_reduce=False,
        overlap_scheduling=True,
        mixed_prefill_decode=True,
        # torch registers RCCL under the name `nccl`; `init_process_group("rccl")` would fail.
        distributed_backend="nccl",
        default_dtype=torch.bfloat16,
        extra={"collective_library": "rccl"},
    )
    native_ops = {"device_runtime": "sglang.platforms.cuda.runtime:CudaRuntime"}

    @classmethod
    def availability(cls) -> Availability:
        if getattr(torch.version, "hip", None) is None:
            return Availability.no("torch was built without HIP")
        if not torch.cuda.is_available():
            return Availability.no("no ROCm (HIP) device visible" + visible_devices_hint("HIP_VISIBLE_DEVICES"))
        return Availability.yes()
