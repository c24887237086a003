"""Conformance suite 1, op parity: every eligible candidate of every op vs the reference.

For each available device, every candidate the platform's kernel families offer for an op (the
bound one and every other that could serve) is compared with the op's reference on the oracle
device (cpu), over every case in `op_cases.CASES`, in fp32, fp16 and bf16. On a device other
than the oracle's, the reference itself runs too: the same torch code on another device is still
a different implementation. Skips come only from declared capabilities (dtypes, page sizes) and
candidates' declared requirements, with the reason.
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

from sglang.ops.binding import REFERENCE_OPS, load, resolve
from sglang.ops.selection import Candidate, reference_candidate
from sglang.platforms.base import ModelFacts

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
SEED_ENV = "SGLANG_TEST_SEED"
"""Added to every case's seed: set it to draw different inputs than the default run."""


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


def case_facts(case: OpCase, dtype: torch.dtype) -> ModelFacts:
    heads, kv_heads, head_dim = case.attention_shape or (None, None, None)
    return ModelFacts(dtype=dtype, head_dim=head_dim, num_heads=heads, num_kv_heads=kv_heads, page_size=case.page_size)


def parity_params() -> list[Any]:
    """(device, candidate, case) triples: every family candidate everywhere, and the reference
    off the oracle device."""
    params = []
    for name in conformance.available_devices():
        platform = conformance.platform(name)
        on_oracle = platform.device_type == conformance.ORACLE_DEVICE.type
        for case in CASES:
            offered = conformance.candidates(platform, case.op)
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
    platform = conformance.platform(device_name)
    conformance.require_dtype(platform, dtype)
    if case.page_size is not None:
        conformance.require_page_size(platform, case.page_size)
    conformance.require_eligible(platform, candidate, case_facts(case, dtype))
    conformance.require_trustworthy_dtype(candidate, dtype)
    impl = load(candidate, platform.kernel_tuning.get(candidate.family))
    reference = resolve(REFERENCE_OPS[case.op])
    seed = zlib.crc32(f"{case.id}-{dtype}".encode()) + int(os.environ.get(SEED_ENV, "0"))
    args = case.make(torch.Generator().manual_seed(seed), dtype)

    expected = case.call(reference, to_device(args, conformance.ORACLE_DEVICE))
    actual = case.call(impl, to_device(args, platform.device()))
    case.check(actual, expected, args, dtype)
