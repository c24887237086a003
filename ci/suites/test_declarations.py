"""Static conformance of every platform's declarations; needs no device (the "static" suite).

This is what a device that is not present here can be checked for: identity, honest and frozen
capabilities, an availability answer that never raises, kernel families whose candidates exist
and fit the op interface, and a device runtime. Candidates are imported where their modules
import here; one that needs an absent vendor package (triton, say) is skipped, saying so.
"""

from __future__ import annotations

import importlib.util
import inspect

import pytest
import torch

from sglang.ci.suites import devices
from sglang.ops.attention import AttentionBackend
from sglang.ops.binding import REFERENCE_OPS, resolve
from sglang.ops.selection import Candidate
from sglang.platforms.base import Availability, Capabilities, Platform
from sglang.platforms.device_runtime import DeviceRuntime
from sglang.platforms.registry import platform_class

DEVICES = devices.static_params()


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


@pytest.mark.parametrize("name", DEVICES)
def test_availability_never_raises_and_explains(name: str) -> None:
    state = platform_class(name).availability()
    assert isinstance(state, Availability)
    if not state.available:
        assert state.reason.strip(), "an unavailable platform must say why"
        assert not state.reason.startswith(f"{name}:"), "the registry adds the platform prefix"


@pytest.mark.parametrize("name", DEVICES)
def test_families_exist_and_name_existing_ops_and_modules(name: str) -> None:
    cls = platform_class(name)
    assert len(set(cls.kernel_families)) == len(cls.kernel_families), "a family listed twice"
    assert set(cls.family_requirements) <= set(cls.kernel_families)
    assert set(cls.kernel_tuning) <= set(cls.kernel_families)
    for candidate in candidates_of(cls()):
        assert candidate.op in REFERENCE_OPS, f"{candidate.qualname}: unknown op {candidate.op}"
        module, _, attr = candidate.qualname.partition(":")
        assert attr, f"{candidate.op}: {candidate.qualname!r} is not 'module:attribute'"
        assert importlib.util.find_spec(module) is not None, f"{candidate.op}: module {module} does not exist"


def candidates_of(platform: Platform) -> list[Candidate]:
    return [c for family in platform.kernel_families for c in platform.family_candidates(family)]


def load_candidate(candidate: Candidate):
    try:
        return resolve(candidate.qualname)
    except ImportError as exc:
        pytest.skip(f"{candidate.qualname} imports {exc.name}, absent here")


@pytest.mark.parametrize("name", DEVICES)
def test_candidates_fit_the_op_interface(name: str) -> None:
    """Candidates take the reference's parameters, in order, so call sites can pass either;
    tunable ones also take the keyword `tuning`."""
    for candidate in candidates_of(platform_class(name)()):
        native, reference = load_candidate(candidate), resolve(REFERENCE_OPS[candidate.op])
        parameters = inspect.signature(native).parameters
        if candidate.tunable:
            assert "tuning" in parameters, f"{candidate.qualname} is tunable but takes no `tuning`"
        if isinstance(reference, type):
            assert isinstance(native, type) and issubclass(native, AttentionBackend), candidate.qualname
            continue
        expected = list(inspect.signature(reference).parameters)
        assert list(parameters)[: len(expected)] == expected, candidate.qualname


@pytest.mark.parametrize("name", DEVICES)
def test_runtime_is_a_device_runtime(name: str) -> None:
    cls = platform_class(name)
    runtime = resolve(cls.runtime_class)
    assert isinstance(runtime, type) and issubclass(runtime, DeviceRuntime)
    assert cls.distributed_backend
