"""The tpu platform's device runtime: JAX's devices through the JAX API.

On XLA:CPU the device memory is the host's, so memory facts come from the host runtime; on a TPU
from the first device's allocator statistics. There is no graph capture: steps are jitted.
"""

from __future__ import annotations

from sglang.platforms.device_runtime import DeviceRuntime, MemoryInfo
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
