"""Conformance suite 1, op parity: every op as a platform serves it vs the reference.

For each available device, each op the platform implements natively is compared with its
reference on the oracle device (cpu), over every case in `op_cases.CASES`, in fp32 and bf16.
Ops that fall back to the reference are compared too when the device is not the oracle's own:
the same torch code on another device is still a different implementation. Unavailable devices
are skipped with their reason (see `test_every_native_op_has_cases`); dtype and page-size skips
come only from the platform's declared capabilities.
"""

from __future__ import annotations

import dataclasses
import os
import zlib
from typing import Any

import conformance
import pytest
import torch
from op_cases import CASES, OpCase

from sglang.ops.binding import REFERENCE_OPS, resolve

DTYPES = (torch.float32, torch.bfloat16)
SEED_ENV = "SGLANG_TEST_SEED"
"""Added to every case's seed: set it to draw different inputs than the default run."""
NON_NUMERIC_OPS = frozenset({"device_runtime"})
"""Ops with no numeric output; `test_device_runtime.py` covers them."""


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


def parity_params() -> list[Any]:
    """(device, case) pairs worth running: natives everywhere, fallbacks off the oracle device."""
    params = []
    for name in conformance.available_devices():
        platform = conformance.platform(name)
        on_oracle = platform.device_type == conformance.ORACLE_DEVICE.type
        for case in CASES:
            if case.op in platform.native_ops or not on_oracle:
                params.append(pytest.param(name, case, id=f"{name}-{case.id}"))
    return params


@pytest.mark.parametrize("device_name", conformance.device_params())
def test_every_native_op_has_cases(device_name: str) -> None:
    """A native op without a parity case would go unchecked; this makes adding one fail."""
    platform = conformance.platform(device_name)
    covered = {case.op for case in CASES} | NON_NUMERIC_OPS
    assert set(REFERENCE_OPS) - covered == set(), "ops without parity cases"
    assert set(platform.native_ops) <= covered


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("device_name", "case"), parity_params())
def test_op_parity(device_name: str, case: OpCase, dtype: torch.dtype) -> None:
    platform = conformance.platform(device_name)
    conformance.require_dtype(platform, dtype)
    if case.page_size is not None:
        conformance.require_page_size(platform, case.page_size)
    impl, _ = conformance.implementation(platform, case.op)
    reference = resolve(REFERENCE_OPS[case.op])
    seed = zlib.crc32(f"{case.id}-{dtype}".encode()) + int(os.environ.get(SEED_ENV, "0"))
    args = case.make(torch.Generator().manual_seed(seed), dtype)

    expected = case.call(reference, to_device(args, conformance.ORACLE_DEVICE))
    actual = case.call(impl, to_device(args, platform.device()))
    case.check(actual, expected, args, dtype)
