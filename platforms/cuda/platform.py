"""The cuda platform: NVIDIA GPUs through a CUDA build of torch.

Native compute kernels (flashinfer, Triton) come later; until then every compute op runs its
torch reference on the GPU, and the device runtime (sync, memory, CUDA graphs) is native.
"""

from __future__ import annotations

import os

import torch

from sglang.platforms.base import Availability, Capabilities, Platform


def visible_devices_hint(variable: str) -> str:
    """` (VAR='...')` when the variable that hides devices is set, else empty: the usual cause."""
    value = os.environ.get(variable)
    return f" ({variable}={value!r})" if value is not None else ""


class CudaPlatform(Platform):
    name = "cuda"
    device_type = "cuda"
    dispatch_key = "CUDA"
    capabilities = Capabilities(
        dtypes=frozenset({torch.float32, torch.bfloat16, torch.float16}),
        page_sizes=None,
        graph_capture=True,
        torch_compile=True,
        triton=True,
        # No custom all-reduce kernel exists yet: all-reduce goes through NCCL.
        custom_all_reduce=False,
        overlap_scheduling=True,
        mixed_prefill_decode=True,
        distributed_backend="nccl",
        default_dtype=torch.bfloat16,
    )
    native_ops = {"device_runtime": "sglang.platforms.cuda.runtime:CudaRuntime"}

    @classmethod
    def availability(cls) -> Availability:
        if torch.version.cuda is None:
            return Availability.no("torch was built without CUDA")
        if not torch.cuda.is_available():
            return Availability.no("no CUDA device visible" + visible_devices_hint("CUDA_VISIBLE_DEVICES"))
        return Availability.yes()
