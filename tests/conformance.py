"""Device parametrization shared by the conformance suites (op parity, model parity, end-to-end).

Suites take their device from `device_params()` and nothing device-specific appears in their
bodies. `SGLANG_TEST_DEVICE=<name>` narrows every suite to one device (ci/matrix.py runs one
pytest per device and suite this way); unset, every known platform is a parameter. An unavailable
device is skipped with its availability reason, and skips inside a test come only from declared
capabilities (`require_dtype`, `require_page_size`), so a skip always says why.

Suite directories put `tests/` on `sys.path` in their conftest.py to import this module.
"""

from __future__ import annotations

import os
from functools import cache
from typing import Any

import pytest
import torch

from sglang.ops.binding import REFERENCE_OPS, resolve
from sglang.platforms.base import Availability, Platform, PlatformError
from sglang.platforms.registry import known_platforms, platform_class

TEST_DEVICE_ENV = "SGLANG_TEST_DEVICE"

ORACLE_DEVICE = torch.device("cpu")
"""Where references run when they serve as the oracle for another device."""

TOLERANCES: dict[torch.dtype, dict[str, float]] = {
    torch.float32: {"atol": 1e-4, "rtol": 1e-4},
    # bf16 keeps 8 significant bits (1 ulp at 1.0 is 2^-7 ~ 7.8e-3); two implementations that round
    # intermediate results differently may land a few ulps apart.
    torch.bfloat16: {"atol": 3e-2, "rtol": 2e-2},
    torch.float16: {"atol": 5e-3, "rtol": 5e-3},
}


def selected_devices() -> list[str]:
    """Every known platform, or only `$SGLANG_TEST_DEVICE` when set (which must be known)."""
    known = list(known_platforms())
    chosen = os.environ.get(TEST_DEVICE_ENV)
    if not chosen:
        return known
    if chosen not in known:
        raise pytest.UsageError(f"{TEST_DEVICE_ENV}={chosen!r} is not a known device (known: {', '.join(known)})")
    return [chosen]


@cache
def availability(name: str) -> Availability:
    return platform_class(name).availability()


def device_params() -> list[Any]:
    """`pytest.param` per selected device; unavailable ones carry a skip mark with the reason."""
    params = []
    for name in selected_devices():
        state = availability(name)
        marks = () if state.available else pytest.mark.skip(reason=f"{name}: {state.reason}")
        params.append(pytest.param(name, id=name, marks=marks))
    return params


def available_devices() -> list[str]:
    return [name for name in selected_devices() if availability(name).available]


def static_params() -> list[Any]:
    """`pytest.param` per selected device, available or not: for checks that need no device."""
    return [pytest.param(name, id=name) for name in selected_devices()]


def platform(name: str) -> Platform:
    return platform_class(name)()


def implementation(platform: Platform, op: str) -> tuple[Any, bool]:
    """The object `platform` binds for `op` and whether it is native (not the reference)."""
    native = op in platform.native_ops
    return resolve(platform.native_ops[op] if native else REFERENCE_OPS[op]), native


def require_dtype(platform: Platform, dtype: torch.dtype) -> None:
    try:
        platform.check_dtype(dtype)
    except PlatformError as exc:
        pytest.skip(str(exc))


def require_page_size(platform: Platform, page_size: int) -> None:
    try:
        platform.check_page_size(page_size)
    except PlatformError as exc:
        pytest.skip(str(exc))


def assert_close(actual: Any, expected: Any, dtype: torch.dtype, what: str = "output") -> None:
    """Compares nested tuples of tensors: floating ones within `TOLERANCES[dtype]`, others exactly."""
    if isinstance(expected, (tuple, list)):
        assert isinstance(actual, (tuple, list)) and len(actual) == len(expected), f"{what}: structure differs"
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_close(a, e, dtype, f"{what}[{i}]")
        return
    actual = actual.to(ORACLE_DEVICE)
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    if expected.is_floating_point():
        torch.testing.assert_close(actual, expected, equal_nan=True, msg=lambda m: f"{what}: {m}", **TOLERANCES[dtype])
    else:
        assert torch.equal(actual, expected), f"{what}: values differ"
