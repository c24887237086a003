"""The npu device runtime: `torch.npu` (installed by `torch_npu`) sync, memory and cache calls,
and decode graphs through torch_npu's aclgraph capture.

`torch_npu.npu.NPUGraph` and the `torch_npu.npu.graph(npu_graph, pool=None, stream=None, ...)`
context mirror `torch.cuda.CUDAGraph` and `torch.cuda.graph` (torch_npu's `npu/graphs.py`): work
queued on the capture stream inside the context is recorded, and `replay()` launches it again
over the same device addresses. `torch_npu` is imported only when a method runs.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import torch

from sglang.platforms.device_runtime import TorchDeviceRuntime

GRAPH_WARMUP_RUNS = 3
"""Eager runs before capture, on a side stream: operator compilation, workspace and allocator
pool set-up happen on first use and must not happen inside a capture."""


class NpuRuntime(TorchDeviceRuntime):
    module_name = "npu"
    supports_graphs = True

    def device_module(self) -> ModuleType:
        import torch_npu  # noqa: F401  (importing it is what installs `torch.npu`)

        return super().device_module()

    def capture_graph(self, fn: Callable[[], torch.Tensor]) -> Callable[[], torch.Tensor]:
        """Captures one call of `fn` as an NPU graph; the returned callable replays it and returns
        the same output tensor, overwritten in place. Inputs `fn` reads must keep their storage
        (update them in place between replays), and `fn` must not read device values on the host.

        Each graph keeps its own memory pool: buckets are captured on first use, in no fixed
        order, and a shared pool is safe only for graphs replayed in their capture order."""
        npu = self.device_module()
        side = npu.Stream()
        side.wait_stream(npu.current_stream())
        with npu.stream(side):
            for _ in range(GRAPH_WARMUP_RUNS):
                fn()
        npu.current_stream().wait_stream(side)
        graph = npu.NPUGraph()
        with npu.graph(graph):
            output = fn()

        def replay() -> torch.Tensor:
            graph.replay()
            return output

        return replay
