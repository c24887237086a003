"""The tpu platform's availability and labels: on XLA:CPU only when asked, and always said so."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from sglang.platforms import select_platform
from sglang.platforms.base import ModelFacts, PlatformError
from sglang.platforms.tpu import backend
from sglang.platforms.tpu.platform import TpuPlatform

try:
    TPU_PRESENT = bool(backend.tpu_devices())
except Exception:  # no TPU here: what these tests expect on machines without one
    TPU_PRESENT = False


@pytest.mark.skipif(TPU_PRESENT, reason="a TPU is present")
def test_without_a_tpu_it_is_unavailable_and_says_how_to_run_on_xla_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JAX_PLATFORMS", raising=False)
    state = TpuPlatform.availability()
    assert not state.available
    assert "no TPU device visible" in state.reason and "JAX_PLATFORMS=cpu" in state.reason
    with pytest.raises(PlatformError, match="no TPU device visible"):
        select_platform("tpu")


def test_on_xla_cpu_every_label_says_so(xla_cpu: None) -> None:
    platform = select_platform("tpu")
    assert platform.describe() == "tpu platform on XLA:CPU"
    table = platform.select_ops(ModelFacts(dtype=torch.float32, head_dim=64, num_heads=9, num_kv_heads=3))
    assert table.header == "tpu platform on XLA:CPU" and table.as_dict()["header"] == table.header
    assert table["attention_backend"].chosen.family == "jax"
    pallas = [r for r in table["attention_backend"].rejected if "pallas" in r.candidate.qualname]
    assert pallas and "head dim 64" in pallas[0].reason


@pytest.mark.skipif(TPU_PRESENT, reason="a TPU is present")
def test_pallas_needs_a_tpu_host(xla_cpu: None) -> None:
    """With a head dim the Pallas kernel serves, only the missing TPU runtime keeps it out."""
    table = TpuPlatform().select_ops(ModelFacts(dtype=torch.bfloat16, head_dim=128, num_heads=8, num_kv_heads=2))
    choice = table["attention_backend"]
    assert choice.chosen.qualname.endswith("attention:RaggedPagedAttention")
    assert any("libtpu not importable" in r.reason for r in choice.rejected)


def test_sglang_ops_names_xla_cpu_never_tpu() -> None:
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    result = subprocess.run(
        [sys.executable, "-m", "sglang.cli", "ops", "--device", "tpu"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "tpu platform on XLA:CPU" in result.stdout
    assert "TPU" not in result.stdout.replace("XLA:CPU", "").replace("libtpu", ""), result.stdout
