"""The cuda-like device runtimes call their own torch device module, and return device memory.

Without the devices here, each module's calls are replaced by recorders: this checks the wiring
(which module, which call, the order of `mem_get_info`'s pair), not the device. The conformance
test in tests/ops/test_device_runtime.py runs the real thing where a device is present.
"""

from __future__ import annotations

import sys
import types

import pytest
import torch

from sglang.platforms.cuda.runtime import CudaRuntime
from sglang.platforms.device_runtime import MemoryInfo, TorchDeviceRuntime
from sglang.platforms.npu.runtime import NpuRuntime
from sglang.platforms.xpu.runtime import XpuRuntime


def recording_module(calls: list[str], free: int, total: int) -> types.SimpleNamespace:
    return types.SimpleNamespace(
        synchronize=lambda: calls.append("synchronize"),
        mem_get_info=lambda: (free, total),
        empty_cache=lambda: calls.append("empty_cache"),
    )


@pytest.mark.parametrize(("runtime_cls", "module"), [(CudaRuntime, "cuda"), (XpuRuntime, "xpu"), (NpuRuntime, "npu")])
def test_runtime_uses_its_device_module(monkeypatch, runtime_cls: type[TorchDeviceRuntime], module: str) -> None:
    calls: list[str] = []
    monkeypatch.setitem(sys.modules, "torch_npu", types.ModuleType("torch_npu"))  # NpuRuntime imports it first
    monkeypatch.setattr(torch, module, recording_module(calls, free=3 << 30, total=80 << 30), raising=False)
    runtime = runtime_cls()
    runtime.synchronize()
    runtime.empty_cache()
    assert runtime.memory_info() == MemoryInfo(free_bytes=3 << 30, total_bytes=80 << 30)
    assert calls == ["synchronize", "empty_cache"]


def test_cuda_and_npu_capture_graphs() -> None:
    assert CudaRuntime.supports_graphs and NpuRuntime.supports_graphs
    assert not XpuRuntime.supports_graphs
    with pytest.raises(NotImplementedError):
        XpuRuntime().capture_graph(lambda: torch.zeros(1))
