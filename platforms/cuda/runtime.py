"""The CUDA (and HIP) device runtime: `torch.cuda` plus graph capture through `torch.cuda.CUDAGraph`.

ROCm builds of torch serve HIP devices through `torch.cuda`, so rocm uses this runtime too.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from sglang.platforms.device_runtime import TorchDeviceRuntime

GRAPH_WARMUP_RUNS = 3
"""Eager runs before capture, on a side stream, as torch's CUDA-graph guide prescribes: lazy
initialization (library handles, allocator pools) must not happen inside a capture."""


class CudaRuntime(TorchDeviceRuntime):
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
