"""The tpu platform: the same torch models run on JAX arrays through torchax.

torchax claims torch's PrivateUse1 dispatch key under the name `jax` when imported, so it is
imported before any `jax` device is named. JAX buffers are immutable and donated under jit, so
KV writes hand back a new buffer, which callers always keep. Every op runs its reference until
the jax family exists.
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
        default_dtype=torch.bfloat16,
    )
    # Collectives are XLA's, issued through JAX, not a torch.distributed backend.
    distributed_backend = "xla"

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
