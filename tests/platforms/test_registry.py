"""Selecting a platform: explicit, auto by priority, out-of-tree entry points, and the errors."""

from __future__ import annotations

import dataclasses
import logging
import sys
import types
from importlib.metadata import EntryPoint

import pytest
import torch

from sglang.platforms import entry_points as entry_point_module
from sglang.platforms import registry
from sglang.platforms.base import Availability, Capabilities, Platform, PlatformError
from sglang.platforms.cpu.platform import CpuPlatform

FAKE_MODULE = "sglang_test_fake_platforms"


class QuantumPlatform(Platform):
    """An out-of-tree platform; its availability is set per test."""

    name = "quantum"
    device_type = "cpu"
    dispatch_key = "CPU"
    capabilities = Capabilities(dtypes=frozenset({torch.float32}), page_sizes=frozenset({16, 32}))
    state = Availability.yes()

    @classmethod
    def availability(cls) -> Availability:
        return cls.state


@pytest.fixture
def entry_points(monkeypatch):
    """Installs fake `sglang.platforms` entry points (name -> qualified name) in the registry."""
    module = types.ModuleType(FAKE_MODULE)
    module.QuantumPlatform = QuantumPlatform
    module.NotAPlatform = object
    monkeypatch.setitem(sys.modules, FAKE_MODULE, module)
    installed: list[EntryPoint] = []

    def fake(group: str) -> list[EntryPoint]:
        return [ep for ep in installed if ep.group == group]

    def install(**entries: str) -> None:
        installed[:] = [EntryPoint(n, v, registry.ENTRY_POINT_GROUP) for n, v in entries.items()]
        installed.append(EntryPoint("elsewhere", f"{FAKE_MODULE}:QuantumPlatform", "other.group"))
        registry._out_of_tree.cache_clear()

    monkeypatch.setattr(entry_point_module, "entry_points", fake)
    install()
    yield install
    registry._out_of_tree.cache_clear()


def set_availability(monkeypatch, name: str, state: Availability) -> None:
    monkeypatch.setattr(registry.platform_class(name), "availability", classmethod(lambda cls: state))


def only_available(monkeypatch, *names: str) -> None:
    for name in registry.BUILTIN_PLATFORMS:
        state = Availability.yes() if name in names else Availability.no(f"{name} switched off by the test")
        set_availability(monkeypatch, name, state)


def test_explicit_cpu() -> None:
    platform = registry.select_platform("cpu")
    assert isinstance(platform, CpuPlatform)


def test_documented_auto_priority(entry_points) -> None:
    assert registry.AUTO_PRIORITY == ("cuda", "rocm", "xpu", "npu", "tpu")
    assert registry.auto_order() == ["cuda", "rocm", "xpu", "npu", "tpu", "cpu"]


@pytest.mark.parametrize(
    ("available", "chosen"),
    [
        (("cuda", "rocm", "tpu", "cpu"), "cuda"),
        (("rocm", "tpu", "cpu"), "rocm"),
        (("npu", "tpu", "cpu"), "npu"),
        (("tpu", "cpu"), "tpu"),
        (("cpu",), "cpu"),
    ],
)
def test_auto_takes_the_first_available(monkeypatch, entry_points, available, chosen) -> None:
    only_available(monkeypatch, *available)
    assert registry.select_platform("auto").name == chosen


def test_auto_on_this_machine_agrees_with_availability(entry_points) -> None:
    expected = next(n for n in registry.auto_order() if registry.platform_class(n).is_available())
    assert registry.select_platform().name == expected


def test_nothing_available_lists_every_reason(monkeypatch, entry_points) -> None:
    only_available(monkeypatch)
    with pytest.raises(PlatformError, match="no platform is available") as err:
        registry.select_platform("auto")
    for name in registry.auto_order():
        assert f"{name}: {name} switched off by the test" in str(err.value)


def test_unknown_device_lists_known_ones(entry_points) -> None:
    entry_points(quantum=f"{FAKE_MODULE}:QuantumPlatform")
    with pytest.raises(PlatformError, match="unknown device 'warp'") as err:
        registry.select_platform("warp")
    for name in ("auto", *registry.BUILTIN_PLATFORMS, "quantum"):
        assert name in str(err.value)


def test_unavailable_device_fails_with_its_reason(monkeypatch) -> None:
    set_availability(monkeypatch, "cuda", Availability.no("no CUDA device visible"))
    with pytest.raises(PlatformError, match=r"^cuda: no CUDA device visible$"):
        registry.select_platform("cuda")


@pytest.mark.parametrize(
    "name", [n for n in registry.BUILTIN_PLATFORMS if not registry.platform_class(n).is_available()]
)
def test_real_unavailable_devices_fail_with_their_reason(name: str) -> None:
    reason = registry.platform_class(name).availability().reason
    with pytest.raises(PlatformError) as err:
        registry.select_platform(name)
    assert str(err.value) == f"{name}: {reason}"


def test_out_of_tree_platform_is_selectable_and_ordered_before_cpu(monkeypatch, entry_points) -> None:
    entry_points(quantum=f"{FAKE_MODULE}:QuantumPlatform", analog=f"{FAKE_MODULE}:QuantumPlatform")
    assert registry.known_platforms()["quantum"] == f"{FAKE_MODULE}:QuantumPlatform"
    assert registry.auto_order()[-3:] == ["analog", "quantum", "cpu"]
    assert "elsewhere" not in registry.known_platforms()
    assert isinstance(registry.select_platform("quantum"), QuantumPlatform)
    only_available(monkeypatch, "cpu")
    assert isinstance(registry.select_platform("auto"), QuantumPlatform)
    monkeypatch.setattr(QuantumPlatform, "state", Availability.no("no qubits"))
    assert registry.select_platform("auto").name == "cpu"
    with pytest.raises(PlatformError, match=r"^quantum: no qubits$"):
        registry.select_platform("quantum")


def test_out_of_tree_cannot_replace_a_builtin(entry_points, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger=registry.__name__):
        entry_points(cuda=f"{FAKE_MODULE}:QuantumPlatform")
        known = registry.known_platforms()
    assert known["cuda"] == registry.BUILTIN_PLATFORMS["cuda"]
    assert "'cuda' is a built-in platform" in caplog.text


def test_entry_point_must_name_a_platform(entry_points) -> None:
    entry_points(broken=f"{FAKE_MODULE}:NotAPlatform")
    with pytest.raises(PlatformError, match="NotAPlatform is not a Platform subclass"):
        registry.select_platform("broken")


def test_dtype_check() -> None:
    cpu = CpuPlatform()
    cpu.check_dtype(torch.bfloat16)
    with pytest.raises(PlatformError, match=r"cpu: dtype torch.float64 is not supported \(supported: .*float32"):
        cpu.check_dtype(torch.float64)


def test_page_size_checks() -> None:
    CpuPlatform().check_page_size(1)
    CpuPlatform().check_page_size(128)  # page_sizes None: any positive size
    with pytest.raises(PlatformError, match="page size 0"):
        CpuPlatform().check_page_size(0)
    quantum = QuantumPlatform()
    quantum.check_page_size(32)
    with pytest.raises(PlatformError, match=r"quantum: page size 1 is not supported \(\[16, 32\]\)"):
        quantum.check_page_size(1)


def test_capabilities_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        CpuPlatform.capabilities.mixed_prefill_decode = False
