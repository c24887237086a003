"""The toy platform: host tensors, the toy_kernels family first, torch_native next."""

from __future__ import annotations

import torch

from sglang.platforms.base import Availability, Capabilities, Platform


class ToyPlatform(Platform):
    name = "toy"
    device_type = "cpu"
    dispatch_key = "CPU"
    capabilities = Capabilities(dtypes=frozenset({torch.float32, torch.bfloat16}), default_dtype=torch.float32)
    kernel_families = ("toy_kernels", "torch_native")
    kernel_tuning = {"toy_kernels": {"chunk": 8}}

    @classmethod
    def availability(cls) -> Availability:
        return Availability.yes()
