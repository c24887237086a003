"""The tpu platform's device runtime: JAX's devices through the JAX API.

On XLA:CPU the device memory is the host's, so memory facts come from the host runtime; on a TPU
from the first device's allocator statistics. There is no graph capture: steps are jitted. KV
slots are read and written with JAX (the storage tier's page copies); reads for storage are
dispatched asynchronously and waited for on the storage writer thread.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from sglang.platforms.device_runtime import DeviceRuntime, MemoryInfo, PendingRead
from sglang.platforms.tpu.backend import xla_cpu_requested


class TpuRuntime(DeviceRuntime):
    def synchronize(self) -> None:
        """Waits for every dispatched JAX computation."""
        import jax

        jax.effects_barrier()

    def memory_info(self) -> MemoryInfo:
        if xla_cpu_requested():
            return super().memory_info()
        import jax

        stats = jax.devices()[0].memory_stats() or {}
        total = int(stats.get("bytes_limit", 0))
        return MemoryInfo(free_bytes=total - int(stats.get("bytes_in_use", 0)), total_bytes=total)

    def read_slots(self, buffer: torch.Tensor, axis: int, slots: torch.Tensor) -> torch.Tensor:
        """KV buffers are torchax tensors over JAX arrays, which torch's own indexing cannot
        read outside a jitted step: gathered with JAX, then brought to the host by DLPack."""
        import jax
        import jax.numpy as jnp

        picked = jnp.take(buffer.jax(), jnp.asarray(slots.to(torch.int32).numpy()), axis=axis)
        host = jax.device_put(picked, jax.devices("cpu")[0])  # a no-op on XLA:CPU
        return torch.from_dlpack(host).clone()  # owned by torch, not by a JAX buffer

    def read_slots_async(self, buffers: Sequence[torch.Tensor], axis: int, slots: torch.Tensor) -> PendingRead:
        """The gather is dispatched (JAX runs it asynchronously, after the steps that wrote the
        buffers, which stay alive as immutable arrays); `wait` brings it to the host."""
        import jax
        import jax.numpy as jnp

        index = jnp.asarray(slots.to(torch.int32).numpy())
        picked = jnp.stack([jnp.take(buffer.jax(), index, axis=axis) for buffer in buffers])

        def finish() -> torch.Tensor:
            return torch.from_dlpack(jax.device_put(picked, jax.devices("cpu")[0])).clone()

        return PendingRead(finish)

    def write_slots(self, buffer: torch.Tensor, axis: int, slots: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """Functional: a new array with the slots set, wrapped like `buffer` (JAX arrays are
        immutable; the runner replaces its buffer with the returned one)."""
        import jax
        import jax.numpy as jnp

        array = buffer.jax()
        index = (slice(None),) * axis + (jnp.asarray(slots.to(torch.int32).numpy()),)
        update = jax.dlpack.from_dlpack(values.to(buffer.dtype).contiguous())
        return type(buffer)(array.at[index].set(jax.device_put(update, array.sharding)), buffer._env)
