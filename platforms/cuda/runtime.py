"""Device runtimes for accelerators that torch exposes as a device module (`torch.cuda`, ...).

`torch.cuda`, `torch.xpu` and `torch.npu` (the last once `torch_npu` is imported) share the
calls used here: `synchronize()`, `mem_get_info() -> (free, total)` and `empty_cache()`. The
module is looked up when a method runs, never at import, so this file imports on any machine.
ROCm builds of torch serve HIP devices through `torch.cuda`, so `CudaRuntime` serves rocm too.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import ClassVar

import torch

from sglang.ops.device import DeviceRuntime, MemoryInfo

GRAPH_WARMUP_RUNS = 3
"""Eager runs before capture, on a side stream, as torch's CUDA-graph guide prescribes: lazy
initialization (library handles, allocator pools) must not happen inside a capture."""


class TorchDeviceRuntime(DeviceRuntime):
    """Runtime over `torch.<module_name>`; subclasses name the module and add graph capture."""

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


class CudaRuntime(TorchDeviceRuntime):
    """CUDA (and HIP) runtime with graph capture through `torch.cuda.CUDAGraph`."""

    module_name = "cuda"
    supports_graphs = True

    def capture_graph(self, fn: Callable[[], torch.Tensor]) -> Callable[[], torch.Tensor]:
        """Captures one call of `fn`; the returned callable replays it and returns the same
        output tensor, overwritten in place. Inputs `fn` reads must keep their storage: update
        them in place between replays."""
        cuda = torch.cuda
        side = cuda.Stream()
        side.wait_stream(cuda.current_stream())
        with cuda.stream(side):
            for _ in range(GRAPH_WARMUP_RUNS):
                fn()
        cuda.current_stream().wait_stream(side)
        graph = cuda.CUDAGraph()
        with cuda.graph(graph):
            output = fn()

        def replay() -> torch.Tensor:
            graph.replay()
            return output

        return replay
