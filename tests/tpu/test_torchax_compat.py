"""The torchax 0.0.13 import compatibility step: applied only when the plain import fails, and
inert for every lookup but the removed named-tensor overloads."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from sglang.platforms.tpu import torchax_compat


def test_named_tensor_overloads_are_recognized() -> None:
    for name in ("dim_Dimname", "dimname", "Dimname_Scalar", "names_dim", "correction_names"):
        assert torchax_compat.is_named_tensor_overload(name)
    for name in ("default", "dim_int", "Tensor", "out"):
        assert not torchax_compat.is_named_tensor_overload(name)


def test_only_missing_named_overloads_read_as_none() -> None:
    present = torch.ops.aten.prod.dim_int
    with torchax_compat.named_overloads_answer_none():
        assert torch.ops.aten.prod.dim_int is present
        assert torch.ops.aten.prod.dim_Dimname_missing_names is None
        with pytest.raises(AttributeError):
            _ = torch.ops.aten.prod.no_such_overload
    # Restored on exit: the missing overload raises again.
    with pytest.raises(AttributeError):
        _ = torch.ops.aten.prod.dim_Dimname_missing_names


def test_plain_import_fails_exactly_as_the_step_expects() -> None:
    """The step exists for this failure; when a fixed torchax is installed this test fails, and
    the compatibility step (and this test) can be dropped."""
    result = subprocess.run([sys.executable, "-c", "import torchax"], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0, "torchax imports on its own now: drop platforms/tpu/torchax_compat.py"
    last = result.stderr.strip().splitlines()[-1]
    assert "has no overload name" in last and "imname" in last, last


def test_import_torchax_then_runs_a_jitted_module(xla_cpu: None) -> None:
    torchax = torchax_compat.import_torchax()
    assert torchax_compat.compat_applied() is True
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.SiLU(), torch.nn.Linear(16, 4))
    x = torch.randn(3, 8)
    expected = module(x)
    env = torchax.default_env()
    with env:
        jitted = torchax.interop.JittableModule(module.to("jax"))
        actual = jitted(x.to("jax"))
    torch.testing.assert_close(torch.from_numpy(actual.jax().__array__().copy()), expected.detach())
