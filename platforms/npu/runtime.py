"""The npu device runtime: `torch.npu` (installed by `torch_npu`) sync, memory and cache calls,
and decode graphs through torch_npu's aclgraph capture.

`torch_npu.npu.NPUGraph` and the `torch_npu.npu.graph(npu_graph, pool=None, stream=None, ...)`
context mirror `torch.cuda.CUDAGraph` and `torch.cuda.graph` (module `torch_npu.npu.graphs`):
work queued on the capture stream inside the context is recorded, and `replay()` launches it
again over the same device addresses. `torch_npu` is imported only when a method runs.
"""

from __future__ import annotations

from types import ModuleType

from sglang.platforms.device_runtime import GraphCapturingRuntime


class NpuRuntime(GraphCapturingRuntime):
    module_name = "npu"
    graph_class = "NPUGraph"

    def device_module(self) -> ModuleType:
        import torch_npu  # noqa: F401  (importing it is what installs `torch.npu`)

        return super().device_module()
