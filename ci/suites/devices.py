"""Device parametrization shared by the conformance suites (op parity, model parity, end-to-end).

Suites take their device from `device_params()` and nothing device-specific appears in their
bodies. `SGLANG_TEST_DEVICE=<name>` narrows every suite to one device (ci/matrix.py runs one
pytest per device and suite this way); unset, every known platform is a parameter. An unavailable
device is skipped with its availability reason, and skips inside a test come only from declared
capabilities (`require_dtype`, `require_page_size`) or a candidate's declared requirements, so
a skip always says why.

`SGLANG_TEST_FAMILIES=triton[,...]` replaces the platform's kernel families for the run: the
matrix uses it with `TRITON_INTERPRET=1` to run the Triton family on cpu tensors in Triton's
interpreter (a column labelled as such, never as a GPU).
"""

from __future__ import annotations

import dataclasses
import os
from functools import cache
from typing import Any

import pytest
import torch

from sglang.ops.selection import Candidate, OpChoice
from sglang.platforms.base import Availability, ModelFacts, Platform, PlatformError
from sglang.platforms.registry import known_platforms, platform_class

TEST_DEVICE_ENV = "SGLANG_TEST_DEVICE"
TEST_FAMILIES_ENV = "SGLANG_TEST_FAMILIES"

ORACLE_DEVICE = torch.device("cpu")
"""Where references run when they serve as the oracle for another device."""

TOLERANCES: dict[torch.dtype, dict[str, float]] = {
    torch.float32: {"atol": 1e-4, "rtol": 1e-4},
    # bf16 keeps 8 significant bits (1 ulp at 1.0 is 2^-7 ~ 7.8e-3); two implementations that round
    # intermediate results differently may land a few ulps apart.
    # Tensor-core dots (Triton, the vendors' kernels) multiply fp16/bf16 operands exactly into fp32
    # accumulators, and attention rounds its softmax probabilities to the value dtype before P @ V:
    # about one operand ulp per product. In fp16 (1 ulp at 1.0 is 2^-10 ~ 9.8e-4) 5e-3 leaves a
    # few ulps for that and for the output's own rounding; bf16's bound above covers it the same way.
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


def families_override() -> tuple[str, ...] | None:
    value = os.environ.get(TEST_FAMILIES_ENV, "").strip()
    return tuple(f.strip() for f in value.split(",") if f.strip()) or None


def platform(name: str) -> Platform:
    """The platform under test, with `$SGLANG_TEST_FAMILIES` as its kernel families when set."""
    return platform_class(name)(kernel_families=families_override())


def candidates(platform: Platform, op: str) -> list[Candidate]:
    """Every candidate the platform's families offer for `op`, in preference order, without the
    reference (which is the oracle)."""
    return [c for family in platform.kernel_families for c in platform.family_candidates(family) if c.op == op]


def choice(platform: Platform, op: str, facts: ModelFacts) -> OpChoice:
    """How `platform` selects `op` for a model with `facts` (force-reference off)."""
    return platform.select_ops(facts, force_reference=False)[op]


def require_eligible(platform: Platform, candidate: Candidate, facts: ModelFacts) -> None:
    """Skips, with the candidate's own reason, when it cannot serve under `facts`."""
    decided = choice(platform, candidate.op, facts)
    if candidate not in decided.eligible():
        reason = next(r.reason for r in decided.rejected if r.candidate == candidate)
        pytest.skip(f"{candidate.family} {candidate.op}: {reason}")


def triton_interpreted() -> bool:
    return os.environ.get("TRITON_INTERPRET", "") == "1"


def require_trustworthy_dtype(candidate: Candidate, dtype: torch.dtype) -> None:
    """Triton's interpreter computes bf16 wrongly (its arithmetic and stores), so interpreted
    Triton kernels are checked in fp32 and fp16 only; bf16 is checked on a GPU."""
    if candidate.family == "triton" and dtype == torch.bfloat16 and triton_interpreted():
        pytest.skip("the Triton interpreter computes bf16 wrongly; bf16 is checked on a GPU only")


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


def to_device(value: Any, device: torch.device) -> Any:
    """A copy of `value` with every tensor moved to `device` (cloned, so callers may mutate it)."""
    if isinstance(value, torch.Tensor):
        return value.to(device, copy=True)
    if isinstance(value, (tuple, list)):
        return type(value)(to_device(v, device) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: to_device(getattr(value, f.name), device) for f in dataclasses.fields(value) if f.init}
        return dataclasses.replace(value, **fields)
    return value


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
