"""The cuda-like device runtimes call their own torch device module, and return device memory;
the host runtime's `empty_cache` returns freed heap memory to the system.

Without the devices here, each module's calls are replaced by recorders: this checks the wiring
(which module, which call, the order of `mem_get_info`'s pair), not the device. The conformance
test in sglang/ci/suites/test_device_runtime.py runs the real thing where a device is present.
"""

from __future__ import annotations

import os
import sys
import types

import pytest
import torch

from sglang.platforms.cuda.runtime import CudaRuntime
from sglang.platforms.device_runtime import DeviceRuntime, MemoryInfo, TorchDeviceRuntime
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


def _resident_mib() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") >> 20


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc; glibc's malloc_trim")
def test_host_empty_cache_returns_freed_heap_memory() -> None:
    """glibc keeps freed blocks below its mmap threshold in the heap, and freeing one large block
    raises that threshold: what a weight update's second copy leaves behind (measured on the
    embedded model: +35 MB of scheduler memory per update without the trim, none with it)."""
    torch.empty(8 << 20, dtype=torch.uint8).fill_(1)  # freed: later blocks up to 8 MiB come from the heap
    blocks = [torch.ones(4 << 20, dtype=torch.uint8) for _ in range(40)]
    top = torch.ones(1024, dtype=torch.uint8)  # above them in the heap: glibc cannot shrink it by itself
    del blocks
    kept = _resident_mib()
    DeviceRuntime().empty_cache()
    assert kept - _resident_mib() > 80, "the freed 160 MiB stayed resident"
    assert top.sum().item() == 1024
