"""Each platform's availability answer under simulated machines: the reason names the cause.

Vendor packages are simulated by small packages written to a temporary directory put first on
`sys.path`, and torch's build facts by monkeypatching `torch.version` and the device modules.
"""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path

import pytest
import torch

from sglang.platforms.cuda.platform import CudaPlatform
from sglang.platforms.npu.platform import NpuPlatform
from sglang.platforms.rocm.platform import RocmPlatform
from sglang.platforms.tpu.platform import TpuPlatform
from sglang.platforms.xpu.platform import XpuPlatform


@pytest.fixture
def fake_packages(tmp_path: Path, monkeypatch):
    """`install(name, source)` makes `import name` run `source` (and shadow any real package)."""

    def install(name: str, source: str) -> None:
        package = tmp_path / name
        package.mkdir(exist_ok=True)
        (package / "__init__.py").write_text(source)
        monkeypatch.delitem(sys.modules, name, raising=False)
        importlib.invalidate_caches()

    monkeypatch.syspath_prepend(str(tmp_path))
    return install


def reason(platform: type) -> str:
    state = platform.availability()
    return "" if state.available else state.reason


def test_cuda(monkeypatch) -> None:
    monkeypatch.setattr(torch.version, "cuda", None)
    assert reason(CudaPlatform) == "torch was built without CUDA"
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert reason(CudaPlatform) == "no CUDA device visible"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert reason(CudaPlatform) == "no CUDA device visible (CUDA_VISIBLE_DEVICES='')"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert CudaPlatform.is_available()


def test_rocm(monkeypatch) -> None:
    monkeypatch.setattr(torch.version, "hip", None)
    assert reason(RocmPlatform) == "torch was built without HIP"
    monkeypatch.setattr(torch.version, "hip", "6.3.42131")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("HIP_VISIBLE_DEVICES", raising=False)
    assert reason(RocmPlatform) == "no ROCm (HIP) device visible"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert RocmPlatform.is_available()


def test_cuda_build_is_not_rocm_and_back(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(torch.version, "hip", None)
    assert CudaPlatform.is_available() and reason(RocmPlatform) == "torch was built without HIP"
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(torch.version, "hip", "6.3.42131")
    assert RocmPlatform.is_available() and reason(CudaPlatform) == "torch is a ROCm (HIP) build: use --device rocm"


def test_xpu(monkeypatch) -> None:
    monkeypatch.setattr(torch.xpu, "_is_compiled", lambda: False)
    assert reason(XpuPlatform) == "torch was built without XPU"
    monkeypatch.setattr(torch.xpu, "_is_compiled", lambda: True)
    monkeypatch.setattr(torch.xpu, "is_available", lambda: False)
    monkeypatch.delenv("ZE_AFFINITY_MASK", raising=False)
    assert reason(XpuPlatform) == "no XPU device visible"
    monkeypatch.setattr(torch.xpu, "is_available", lambda: True)
    assert XpuPlatform.is_available()
    monkeypatch.delattr(torch, "xpu")
    assert reason(XpuPlatform) == "torch was built without XPU"


def test_npu(monkeypatch, fake_packages) -> None:
    monkeypatch.setitem(sys.modules, "torch_npu", None)  # what Python reports for an absent package
    assert reason(NpuPlatform) == "torch_npu is not installed"
    fake_packages("torch_npu", "raise OSError('libascendcl.so: cannot open shared object file')\n")
    assert reason(NpuPlatform) == "torch_npu failed to import: libascendcl.so: cannot open shared object file"
    fake_packages("torch_npu", "")
    npu = types.SimpleNamespace(is_available=lambda: False)
    monkeypatch.setattr(torch, "npu", npu, raising=False)
    monkeypatch.delenv("ASCEND_RT_VISIBLE_DEVICES", raising=False)
    assert reason(NpuPlatform) == "no Ascend NPU visible"
    npu.is_available = lambda: True
    assert NpuPlatform.is_available()


def test_tpu(monkeypatch, fake_packages) -> None:
    monkeypatch.setitem(sys.modules, "jax", None)
    assert reason(TpuPlatform).startswith("jax is not installed")
    fake_packages(
        "jax",
        "def devices(backend=None):\n"
        "    raise RuntimeError(\"Unknown backend: 'tpu' requested, but no platforms are tpu.\\nPresent: cpu\")\n",
    )
    monkeypatch.setitem(sys.modules, "torchax", None)
    assert reason(TpuPlatform).startswith("torchax is not installed")
    fake_packages("torchax", "")
    monkeypatch.delenv("TPU_LIBRARY_PATH", raising=False)
    # Without a TPU runtime JAX is not even asked (its probe would log a TPU warning on any machine).
    assert reason(TpuPlatform) == (
        "no TPU device visible (libtpu is not installed); JAX_PLATFORMS=cpu runs the tpu platform on XLA:CPU"
    )
    monkeypatch.setenv("TPU_LIBRARY_PATH", "/opt/libtpu.so")
    assert reason(TpuPlatform) == (
        "no TPU device visible (Unknown backend: 'tpu' requested, but no platforms are tpu.); "
        "JAX_PLATFORMS=cpu runs the tpu platform on XLA:CPU"
    )
    fake_packages("jax", "def devices(backend=None):\n    return ['TPU_0']\n")
    assert TpuPlatform.is_available()
