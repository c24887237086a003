"""The device runtime: synchronization, memory facts, cache release and graph capture."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class MemoryInfo:
    free_bytes: int
    total_bytes: int


class DeviceRuntime:
    """Host-memory runtime: what the reference and the cpu platform use.

    Devices with streams and graphs subclass it; `capture_graph` returns a callable that replays
    `fn` with the same static inputs, or raises where the platform declares no graph support.
    """

    supports_graphs = False

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
