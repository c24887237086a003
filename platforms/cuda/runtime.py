"""The CUDA (and HIP) device runtime: `torch.cuda`, with graph capture through `torch.cuda.CUDAGraph`.

ROCm builds of torch serve HIP devices through `torch.cuda`, so rocm uses this runtime too.
"""

from __future__ import annotations

from sglang.platforms.device_runtime import GraphCapturingRuntime


class CudaRuntime(GraphCapturingRuntime):
    module_name = "cuda"
    graph_class = "CUDAGraph"
