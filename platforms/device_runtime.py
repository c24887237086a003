"""Device runtimes: synchronization, memory facts, cache release, graph capture, static steps.

A runtime is a device service of the Platform, not an op: `--reference-ops` never swaps it, so a
GPU pool is always sized from GPU memory. `DeviceRuntime` serves host memory (cpu, and any
platform whose tensors live on the host). `TorchDeviceRuntime` serves accelerators that torch
exposes as a device module (`torch.cuda`, `torch.xpu`, `torch.npu` once `torch_npu` is imported),
which share `synchronize()`, `mem_get_info() -> (free, total)` and `empty_cache()`. The module is
looked up when a method runs, never at import, so this file imports on any machine.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import ClassVar

import torch

from sglang.ops.step import StepOutput

BucketStep = Callable[[list[torch.Tensor]], StepOutput]
"""One decode bucket's step: KV buffers in; float32 logits of every padded row `[bucket, V]` and
the KV buffers it wrote out (the same tensors on in-place devices)."""


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """The C library when it is glibc (which has `malloc_trim`), else None."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "malloc_trim") else None


@dataclass(frozen=True)
class MemoryInfo:
    free_bytes: int
    total_bytes: int


class PendingRead:
    """A copy of KV slots to the host that may still be under way: `wait()` blocks until it is
    complete and returns the host tensor (the same one on every call; one thread at a time)."""

    def __init__(self, finish: Callable[[], torch.Tensor]) -> None:
        self._finish: Callable[[], torch.Tensor] | None = finish
        self._value: torch.Tensor | None = None

    def wait(self) -> torch.Tensor:
        if self._finish is not None:
            self._value, self._finish = self._finish(), None
        assert self._value is not None
        return self._value


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
        """Returns the C allocator's free heap memory to the system (glibc's `malloc_trim`): large
        freed blocks otherwise stay in the process, since glibc raises its mmap threshold to the
        size of each one freed (so the next ones come from the heap, which it keeps)."""
        libc = _glibc()
        if libc is not None:
            libc.malloc_trim(0)

    def read_slots(self, buffer: torch.Tensor, axis: int, slots: torch.Tensor) -> torch.Tensor:
        """A host copy of `buffer`'s entries at `slots` along its slot `axis` (KV pages leaving
        the device for a lower cache tier); the copy is complete when this returns."""
        picked = buffer.index_select(axis, slots.to(buffer.device))
        return picked.to("cpu")

    def write_slots(self, buffer: torch.Tensor, axis: int, slots: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """Writes host `values` into `buffer` at `slots` along `axis` (KV pages coming back from
        a lower tier) and returns the buffer that now holds them: the same tensor where the device
        updates in place, as here; a functional device returns a new one."""
        index = slots.to(buffer.device)
        return buffer.index_copy_(axis, index, values.to(buffer.device, buffer.dtype))

    def read_slots_async(self, buffers: Sequence[torch.Tensor], axis: int, slots: torch.Tensor) -> PendingRead:
        """Starts copying every buffer's entries at `slots` (along `axis`) to the host, stacked
        `[len(buffers), ...]`, after the work already queued on the buffers; the caller goes on
        and `wait()`s where it needs the values (the storage writer thread). The slots may be
        reused as soon as this returns. Host memory has nothing to overlap: done at once."""
        self.synchronize()
        value = torch.stack([self.read_slots(buffer, axis, slots) for buffer in buffers])
        return PendingRead(lambda: value)

    def host_buffer(self, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        """An uninitialized host tensor for KV pages kept off the device (a lower cache tier)."""
        return torch.empty(tuple(shape), dtype=dtype)

    def capture_graph(self, fn: Callable[[], torch.Tensor]) -> Callable[[], torch.Tensor]:
        raise NotImplementedError(f"{type(self).__name__} has no graph capture")

    def capture_step(self, step: BucketStep, kv_buffers: list[torch.Tensor]) -> BucketStep:
        """Makes `step` static for the buffers it is first called with (it may run it to do so);
        the captured step runner calls this once per bucket. A platform that declares captured
        steps has a runtime that implements it."""
        raise NotImplementedError(f"{type(self).__name__} cannot make a step static")


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

    def host_buffer(self, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        """Pinned (page-locked) host memory, so copies to and from the device can be async;
        plain host memory where the driver refuses to pin."""
        try:
            return torch.empty(tuple(shape), dtype=dtype, pin_memory=True)
        except RuntimeError:
            return torch.empty(tuple(shape), dtype=dtype)

    def device_count(self) -> int:
        """Devices this process sees (after the platform's visible-devices variable)."""
        return int(self.device_module().device_count())

    def set_device(self, index: int) -> None:
        """Makes device `index` this process's current one: where `memory_info`, `synchronize`,
        caches and the collective backend's communicator act."""
        self.device_module().set_device(index)


GRAPH_WARMUP_RUNS = 3
"""Eager runs before capture, on a side stream, as torch's CUDA-graph guide prescribes: lazy
initialization (library handles, operator compilation, allocator pools) must not happen inside
a capture."""


class GraphCapturingRuntime(TorchDeviceRuntime):
    """A device module with graphs in the shape of `torch.cuda`'s: `Stream`, `stream(s)`,
    `current_stream()`, `graph(g)` and the graph class `graph_class` (torch_npu mirrors it)."""

    supports_graphs = True
    graph_class: ClassVar[str]

    def capture_graph(self, fn: Callable[[], torch.Tensor]) -> Callable[[], torch.Tensor]:
        """Captures one call of `fn`; the returned callable replays it and returns the same output
        tensor, overwritten in place. Inputs `fn` reads must keep their storage (update them in
        place between replays), and `fn` must not read device values on the host.

        Each graph keeps its own memory pool: buckets are captured on first use, in no fixed
        order, and a shared pool is safe only for graphs replayed in their capture order."""
        device = self.device_module()
        side = device.Stream()
        side.wait_stream(device.current_stream())
        with device.stream(side):
            for _ in range(GRAPH_WARMUP_RUNS):
                fn()
        device.current_stream().wait_stream(side)
        graph = getattr(device, self.graph_class)()
        with device.graph(graph):
            output = fn()

        def replay() -> torch.Tensor:
            graph.replay()
            return output

        return replay

    def capture_step(self, step: BucketStep, kv_buffers: list[torch.Tensor]) -> BucketStep:
        """A graph of one call of `step`. The graph wrote the KV buffers it was captured with, in
        place, so a replay must be handed those same tensors."""
        captured = list(kv_buffers)
        replay = self.capture_graph(lambda: step(captured))

        def run(buffers: list[torch.Tensor]) -> StepOutput:
            if len(buffers) != len(captured) or any(a is not b for a, b in zip(buffers, captured)):
                raise RuntimeError("a captured graph replays only over the KV buffers it was captured with")
            return replay()

        return run


def visible_devices_hint(variable: str) -> str:
    """` (VAR='...')` when the variable that hides devices is set, else empty: the usual cause."""
    value = os.environ.get(variable)
    return f" ({variable}={value!r})" if value is not None else ""
