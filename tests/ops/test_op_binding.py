"""Binding ops at startup: natives where a platform has them, references otherwise or when forced."""

from __future__ import annotations

import logging

import pytest

from sglang import ops
from sglang.ops.binding import FORCE_REFERENCE_ENV, REFERENCE_OPS, bind, resolve
from sglang.platforms.cpu.platform import CpuPlatform


@pytest.fixture(autouse=True)
def restore_bindings():
    """Binding rewrites `sglang.ops` attributes; put the previous ones back for other tests."""
    saved = {name: getattr(ops, name) for name in REFERENCE_OPS}
    yield
    for name, implementation in saved.items():
        setattr(ops, name, implementation)


@pytest.mark.parametrize("value", ["1", "true", "YES"])
def test_environment_forces_every_op_to_its_reference(monkeypatch, caplog, value: str) -> None:
    assert CpuPlatform.native_ops, "the check needs a platform with native ops"
    monkeypatch.setenv(FORCE_REFERENCE_ENV, value)
    with caplog.at_level(logging.INFO, logger="sglang.ops.binding"):
        bindings = CpuPlatform().bind_ops()
    assert {b.name for b in bindings} == set(REFERENCE_OPS)
    for binding in bindings:
        assert not binding.native
        assert binding.qualname == REFERENCE_OPS[binding.name]
        assert getattr(ops, binding.name) is resolve(REFERENCE_OPS[binding.name])
    assert "every op forced to its reference" in caplog.text


def test_argument_forces_reference_without_environment(monkeypatch) -> None:
    monkeypatch.delenv(FORCE_REFERENCE_ENV, raising=False)
    bindings = CpuPlatform().bind_ops(force_reference=True)
    assert not any(b.native for b in bindings)
    assert ops.rms_norm is resolve(REFERENCE_OPS["rms_norm"])


def test_natives_are_bound_and_fallbacks_logged(monkeypatch, caplog) -> None:
    monkeypatch.setenv(FORCE_REFERENCE_ENV, "0")
    with caplog.at_level(logging.INFO, logger="sglang.ops.binding"):
        bindings = CpuPlatform().bind_ops()
    native = {b.name for b in bindings if b.native}
    assert native == set(CpuPlatform.native_ops)
    for name, qualname in CpuPlatform.native_ops.items():
        assert getattr(ops, name) is resolve(qualname)
    assert ops.sample is resolve(REFERENCE_OPS["sample"])
    fallback_line = next(r.getMessage() for r in caplog.records if "reference implementation used" in r.getMessage())
    assert "sample" in fallback_line and "rms_norm" not in fallback_line


def test_unknown_op_names_are_refused() -> None:
    with pytest.raises(KeyError, match="flash_decode"):
        bind({"flash_decode": "sglang.ops.norm:rms_norm"}, owner="fake")


def test_qualified_names_need_an_attribute() -> None:
    with pytest.raises(ValueError, match=r"package\.module:attribute"):
        resolve("sglang.ops.norm")
