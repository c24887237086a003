"""Conformance suite 1, op parity: every eligible candidate of every op vs the reference.

For each available device, every candidate the platform's kernel families offer for an op (the
bound one and every other that could serve) is compared with the op's reference on the oracle
device (cpu), over every case in `op_cases.CASES`, in fp32, fp16 and bf16. On a device other
than the oracle's, the reference itself runs too: the same torch code on another device is still
a different implementation. Skips come only from declared capabilities (dtypes, page sizes) and
candidates' declared requirements, with the reason.
"""

from __future__ import annotations

import os
import zlib
from typing import Any

import pytest
import torch

from sglang.ci.suites import devices
from sglang.ci.suites.devices import to_device
from sglang.ci.suites.op_cases import CASES, OpCase
from sglang.ops.binding import REFERENCE_OPS, load, resolve
from sglang.ops.selection import Candidate, reference_candidate
from sglang.platforms.base import ModelFacts

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
SEED_ENV = "SGLANG_TEST_SEED"
"""Added to every case's seed: set it to draw different inputs than the default run."""


def case_facts(case: OpCase, dtype: torch.dtype) -> ModelFacts:
    heads, kv_heads, head_dim = case.attention_shape or (None, None, None)
    return ModelFacts(
        dtype=dtype,
        head_dim=head_dim,
        num_heads=heads,
        num_kv_heads=kv_heads,
        page_size=case.page_size,
        features=case.features,
    )


def parity_params() -> list[Any]:
    """(device, candidate, case) triples: every family candidate everywhere, and the reference
    off the oracle device."""
    params = []
    for name in devices.available_devices():
        platform = devices.platform(name)
        on_oracle = platform.device_type == devices.ORACLE_DEVICE.type
        for case in CASES:
            offered = devices.candidates(platform, case.op)
            if not on_oracle:
                offered.append(reference_candidate(case.op))
            params.extend(pytest.param(name, c, case, id=f"{name}-{c.family}-{case.id}") for c in offered)
    return params


def test_every_op_has_cases() -> None:
    """An op without a parity case would go unchecked; this makes adding one fail."""
    assert set(REFERENCE_OPS) - {case.op for case in CASES} == set(), "ops without parity cases"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("device_name", "candidate", "case"), parity_params())
def test_op_parity(device_name: str, candidate: Candidate, case: OpCase, dtype: torch.dtype) -> None:
    platform = devices.platform(device_name)
    devices.require_dtype(platform, dtype)
    if case.page_size is not None:
        devices.require_page_size(platform, case.page_size)
    devices.require_eligible(platform, candidate, case_facts(case, dtype))
    devices.require_trustworthy_dtype(candidate, dtype)
    impl = load(candidate, platform.kernel_tuning.get(candidate.family))
    reference = resolve(REFERENCE_OPS[case.op])
    seed = zlib.crc32(f"{case.id}-{dtype}".encode()) + int(os.environ.get(SEED_ENV, "0"))
    args = case.make(torch.Generator().manual_seed(seed), dtype)

    expected = case.call(reference, to_device(args, devices.ORACLE_DEVICE))
    actual = case.call(impl, to_device(args, platform.device()))
    case.check(actual, expected, args, dtype)
