"""Static conformance of every platform's declarations; needs no device (the "static" suite).

This is what a device that is not present here can be checked for: identity, honest and frozen
capabilities, an availability answer that never raises, and a native-op table whose entries
exist and fit the op interface. Entries are imported where their modules import here (vendor
imports inside them are lazy); one that needs an absent vendor package is skipped, saying so.
"""

from __future__ import annotations

import importlib.util
import inspect

import conformance
import pytest
import torch

from sglang.ops.attention import AttentionBackend
from sglang.ops.binding import REFERENCE_OPS, resolve
from sglang.ops.device import DeviceRuntime
from sglang.platforms.base import Availability, Capabilities, Platform
from sglang.platforms.registry import platform_class

INTERFACES: dict[str, type] = {"attention_backend": AttentionBackend, "device_runtime": DeviceRuntime}
"""The interface a native class must implement, for the ops whose reference is a class."""

DEVICES = conformance.static_params()


@pytest.mark.parametrize("name", DEVICES)
def test_identity(name: str) -> None:
    cls = platform_class(name)
    assert issubclass(cls, Platform) and cls.name == name
    assert cls.device_type and cls.device_type == cls.device_type.lower()
    assert cls.dispatch_key in torch._C.DispatchKey.__members__


@pytest.mark.parametrize("name", DEVICES)
def test_capabilities(name: str) -> None:
    caps = platform_class(name).capabilities
    assert isinstance(caps, Capabilities)
    assert caps.dtypes and all(d.is_floating_point for d in caps.dtypes)
    assert caps.default_dtype in caps.dtypes
    assert caps.page_sizes is None or (caps.page_sizes and all(p >= 1 for p in caps.page_sizes))
    assert caps.distributed_backend


@pytest.mark.parametrize("name", DEVICES)
def test_availability_never_raises_and_explains(name: str) -> None:
    state = platform_class(name).availability()
    assert isinstance(state, Availability)
    if not state.available:
        assert state.reason.strip(), "an unavailable platform must say why"
        assert not state.reason.startswith(f"{name}:"), "the registry adds the platform prefix"


@pytest.mark.parametrize("name", DEVICES)
def test_native_table_names_existing_ops_and_modules(name: str) -> None:
    native_ops = platform_class(name).native_ops
    assert set(native_ops) <= set(REFERENCE_OPS)
    for op, qualname in native_ops.items():
        module, _, attr = qualname.partition(":")
        assert attr, f"{op}: {qualname!r} is not 'module:attribute'"
        assert importlib.util.find_spec(module) is not None, f"{op}: module {module} does not exist"


def load_native(qualname: str):
    try:
        return resolve(qualname)
    except ImportError as exc:
        pytest.skip(f"{qualname} imports {exc.name}, absent here")


@pytest.mark.parametrize("name", DEVICES)
def test_natives_fit_the_op_interface(name: str) -> None:
    """Natives take the reference's parameters, in order, so call sites can pass either."""
    cls = platform_class(name)
    for op, qualname in cls.native_ops.items():
        native, reference = load_native(qualname), resolve(REFERENCE_OPS[op])
        if isinstance(reference, type):
            assert isinstance(native, type) and issubclass(native, INTERFACES[op]), f"{op}: {native}"
            continue
        expected = list(inspect.signature(reference).parameters)
        assert list(inspect.signature(native).parameters)[: len(expected)] == expected, f"{op}: {qualname}"


@pytest.mark.parametrize("name", DEVICES)
def test_graph_capture_declared_iff_the_runtime_captures(name: str) -> None:
    cls = platform_class(name)
    runtime = load_native(cls.native_ops.get("device_runtime", REFERENCE_OPS["device_runtime"]))
    assert runtime.supports_graphs == cls.capabilities.graph_capture
