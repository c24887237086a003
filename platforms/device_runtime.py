"""Device runtimes: synchronization, memory facts, cache release, graph capture.

A runtime is a device service of the Platform, not an op: `--reference-ops` never swaps it, so a
GPU pool is always sized from GPU memory. `DeviceRuntime` serves host memory (cpu, and any
platform whose tensors live on the host). `TorchDeviceRuntime` serves accelerators that torch
exposes as a device module (`torch.cuda`, `torch.xpu`, `torch.npu` once `torch_npu` is imported),
which share `synchronize()`, `mem_get_info() -> (free, total)` and `empty_cache()`. The module is
looked up when a method runs, never at import, so this file imports on any machine.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import ClassVar

import torch


@dataclass(frozen=True)
class MemoryInfo:
    free_bytes: int
    total_bytes: int


class DeviceRuntime:
    """Host-memory runtime. `capture_graph` returns a callable that replays `fn` with the same
    static inputs, or raises where the runtime has no graphs (`supports_graphs` is False)."""

    supports_graphs: ClassVar[bool] = False

    def synchronize(self) -> None:
        """Host execution is synchronous: nothing to wait for."""

    def memory_info(self) -> MemoryInfo:
        fields: dict[str, int] = {}
        with open("/proc/meminfo") as f:
            for line in f:
                name, value = line.split(":", 1)
                fields[name] = int(value.split()[0]) * 1024
        return MemoryInfo(free_bytes=fields["MemAvailable"], total_bytes=fields["MemTotal"])

    def empty_cache(self) -> None:
        """The host allocator returns memory on its own."""

    def capture_graph(self, fn: Callable[[], torch.Tensor]) -> Callable[[], torch.Tensor]:
        raise NotImplementedError(f"{type(self).__name__} has no graph capture")


class TorchDeviceRuntime(DeviceRuntime):
    """Runtime over `torch.<module_name>`; subclasses name the module and may add graph capture."""

    module_name: ClassVar[str]

    def device_module(self) -> ModuleType:
        return getattr(torch, self.module_name)

    def synchronize(self) -> None:
        """Blocks until every queued kernel on the current device has finished."""
        self.device_module().synchronize()

    def memory_info(self) -> MemoryInfo:
        """Device memory (not host memory): free as the driver reports it, across processes."""
        free, total = self.device_module().mem_get_info()
        return MemoryInfo(free_bytes=int(free), total_bytes=int(total))

    def empty_cache(self) -> None:
        """Returns the caching allocator's unused blocks to the driver."""
        self.device_module().empty_cache()


def visible_devices_hint(variable: str) -> str:
    """` (VAR='...')` when the variable that hides devices is set, else empty: the usual cause."""
    value = os.environ.get(variable)
    return f" ({variable}={value!r})" if value is not None else ""
