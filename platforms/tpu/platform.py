"""The tpu platform: the same torch models run on JAX arrays through torchax.

torchax claims torch's PrivateUse1 dispatch key under the name `jax` when imported, so it is
imported before any `jax` device is named. JAX buffers are immutable and donated under jit, so
KV writes hand back a new buffer (`functional_kv`). Pallas kernels come later.
"""

from __future__ import annotations

import importlib.util

import torch

from sglang.platforms.base import Availability, Capabilities, Platform


class TpuPlatform(Platform):
    name = "tpu"
    device_type = "jax"
    dispatch_key = "PrivateUse1"
    capabilities = Capabilities(
        # TPUs compute bf16 natively; fp16 is not a TPU type.
        dtypes=frozenset({torch.float32, torch.bfloat16}),
        page_sizes=None,
        # jit compilation is the TPU's answer to graph capture; there is no capture-and-replay API.
        graph_capture=False,
        torch_compile=False,
        triton=False,
        custom_all_reduce=False,
        overlap_scheduling=False,
        mixed_prefill_decode=True,
        functional_kv=True,
        # Not a torch.distributed backend: collectives are XLA's, issued through JAX.
        distributed_backend="xla",
        default_dtype=torch.bfloat16,
    )

    @classmethod
    def availability(cls) -> Availability:
        for package in ("jax", "torchax"):
            if importlib.util.find_spec(package) is None:
                return Availability.no(f"{package} is not installed")
        try:
            import jax

            devices = jax.devices("tpu")
        except Exception as exc:  # jax raises RuntimeError naming the backends it did find
            first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            return Availability.no(f"no TPU device visible ({first_line})")
        if not devices:
            return Availability.no("no TPU device visible")
        return Availability.yes()

    def device(self, index: int = 0) -> torch.device:
        import torchax  # noqa: F401  (registers the `jax` device type)

        return super().device(index)
