"""Choosing one kernel per op: eligibility, preference, overrides, forcing the reference, binding."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import torch

from sglang import ops
from sglang.ops.binding import FORCE_REFERENCE_ENV, REFERENCE_OPS, install, resolve, restore, snapshot
from sglang.ops.selection import Candidate, Requirements, SelectionContext, SelectionError, choose, select
from sglang.platforms.base import ModelFacts
from sglang.platforms.cpu.platform import CpuPlatform
from sglang.platforms.cuda.platform import CudaPlatform
from sglang.platforms.xpu.platform import XpuPlatform

FP32 = SelectionContext(dtype=torch.float32, head_dim=64, gqa_ratio=3, page_size=1)


@pytest.fixture(autouse=True)
def restore_bindings() -> Iterator[None]:
    """Binding rewrites `sglang.ops` attributes; put the previous ones back for other tests."""
    saved = snapshot()
    yield
    restore(saved)


ANY = Requirements()


def norm(family: str, requires: Requirements = ANY, priority: int = 0) -> Candidate:
    return Candidate("rms_norm", family, f"sglang.ops.norm:rms_norm_{family}", requires, priority)


def test_first_eligible_family_in_preference_order_wins() -> None:
    fast, slow = norm("fast"), norm("slow")
    decided = choose("rms_norm", [slow, fast], ("fast", "slow"), FP32)
    assert decided.chosen == fast
    assert [(r.candidate.family, r.reason, r.eligible) for r in decided.rejected] == [
        ("slow", "fast preferred", True),
        ("reference", "fast preferred", True),
    ]
    assert decided.eligible() == [fast, slow, decided.rejected[-1].candidate]


def test_priority_orders_candidates_within_a_family() -> None:
    low, high = norm("fam", priority=0), norm("fam", priority=5)
    assert choose("rms_norm", [low, high], ("fam",), FP32).chosen == high


def test_families_the_platform_does_not_list_are_ignored() -> None:
    decided = choose("rms_norm", [norm("elsewhere")], ("fam",), FP32)
    assert decided.chosen.family == "reference" and decided.rejected == ()


@pytest.mark.parametrize(
    ("requires", "reason"),
    [
        (Requirements(packages=("no_such_package_xyz",)), "no_such_package_xyz not importable"),
        (Requirements(head_dims=frozenset({128, 256})), "head dim 64 not supported (supports 128, 256)"),
        (Requirements(page_sizes=frozenset({16})), "page size 1 not supported (supports 16)"),
        (Requirements(gqa_ratios=frozenset({1})), "GQA ratio 3 not supported (supports 1)"),
        (Requirements(dtypes=frozenset({torch.float16})), "dtype float32 not supported (supports float16)"),
        (Requirements(weight_formats=frozenset({"int4"})), "weight format dense not supported (supports int4)"),
    ],
)
def test_ineligible_candidates_lose_with_their_reason(requires: Requirements, reason: str) -> None:
    ctx = SelectionContext(**{**FP32.__dict__, "package_present": lambda name: name != "no_such_package_xyz"})
    decided = choose("rms_norm", [norm("fam", requires)], ("fam",), ctx)
    assert decided.chosen.family == "reference"
    assert (decided.rejected[0].reason, decided.rejected[0].eligible) == (reason, False)


def test_minimum_capability() -> None:
    needs_hopper = norm("fam", Requirements(min_capability=(9, 0)))
    ampere = SelectionContext(dtype=torch.float32, device_capability=(8, 6))
    decided = choose("rms_norm", [needs_hopper], ("fam",), ampere)
    assert decided.rejected[0].reason == "needs device capability 9.0, device has 8.6"


def test_unknown_facts_are_not_checked() -> None:
    """`sglang ops` without a model knows no head dim: shape requirements do not exclude."""
    picky = norm("fam", Requirements(head_dims=frozenset({128})))
    assert choose("rms_norm", [picky], ("fam",), SelectionContext(dtype=torch.float32)).chosen == picky


def test_override_picks_the_named_family_or_fails_with_the_reason() -> None:
    fast, slow = norm("fast"), norm("slow", Requirements(page_sizes=frozenset({16})))
    assert choose("rms_norm", [fast, slow], ("fast", "slow"), FP32, override="reference").chosen.family == "reference"
    with pytest.raises(SelectionError, match=r"rms_norm=slow: not eligible: page size 1 not supported"):
        choose("rms_norm", [fast, slow], ("fast", "slow"), FP32, override="slow")
    unknown = r"rms_norm=triton: no triton candidate.*candidates: fast, slow, reference"
    with pytest.raises(SelectionError, match=unknown):
        choose("rms_norm", [fast, slow], ("fast", "slow"), FP32, override="triton")


def test_override_of_an_unknown_op_is_refused() -> None:
    with pytest.raises(SelectionError, match="flash_decode"):
        select("fake", [], (), FP32, overrides={"flash_decode": "triton"})


def test_forcing_the_reference_binds_every_op_to_it(monkeypatch, caplog) -> None:
    monkeypatch.setenv(FORCE_REFERENCE_ENV, "1")
    with caplog.at_level(logging.INFO, logger="sglang.platforms.base"):
        table = CpuPlatform().bind_ops(ModelFacts(dtype=torch.float32))
    assert table.forced_reference and not any(c.native for c in table.choices)
    for name, qualname in REFERENCE_OPS.items():
        assert getattr(ops, name) is resolve(qualname)
    assert "every op forced to its reference" in caplog.text


def test_cpu_binds_a_family_kernel_wherever_its_families_offer_one(monkeypatch, caplog) -> None:
    monkeypatch.delenv(FORCE_REFERENCE_ENV, raising=False)
    cpu = CpuPlatform()
    with caplog.at_level(logging.INFO, logger="sglang.platforms.base"):
        table = cpu.bind_ops(ModelFacts(dtype=torch.float32, head_dim=64, num_heads=9, num_kv_heads=3))
    eligible = {c.op for c in table.choices if any(e.family != "reference" for e in c.eligible())}
    native = {c.op: c.chosen for c in table.choices if c.native}
    assert set(native) == eligible and {"attention_backend", "rms_norm"} <= eligible
    for op, chosen in native.items():
        assert chosen.family in cpu.kernel_families
        assert getattr(ops, op) is resolve(chosen.qualname)
    assert ops.sample is resolve(REFERENCE_OPS["sample"])
    assert f"attention_backend={native['attention_backend'].family}" in caplog.text
    assert "sample=reference" in caplog.text


def test_tunable_candidates_receive_the_platform_tuning() -> None:
    tunable = Candidate("rms_norm", "fam", "sglang.ops.norm:rms_norm", tunable=True)
    table = select("fake", [tunable], ("fam",), FP32)
    install(table, {"fam": {"block": 128}})
    assert ops.rms_norm.func is resolve("sglang.ops.norm:rms_norm")
    assert ops.rms_norm.keywords == {"tuning": {"block": 128}}


def test_declared_device_assumes_packages_unless_named_missing() -> None:
    """On a machine without CUDA the table is cuda's declaration: vendor packages are assumed
    present unless `assume_missing` names them, and the table says why the device is unavailable."""
    facts = ModelFacts(dtype=torch.bfloat16, head_dim=64, num_heads=9, num_kv_heads=3, page_size=1)
    declared = CudaPlatform().select_ops(facts)
    assert declared["attention_backend"].chosen.family == CudaPlatform.kernel_families[0]
    assert declared.header.startswith("not available here")
    vendors = [f for f in CudaPlatform.kernel_families if f != "torch_native"]
    without = CudaPlatform().select_ops(facts, assume_missing=vendors)
    attention = without["attention_backend"]
    assert attention.chosen.family == "torch_native"
    assert {r.reason for r in attention.rejected if r.candidate.family in vendors} <= {
        f"{p} not importable" for p in vendors
    }


def test_xpu_needs_intels_triton_build() -> None:
    facts = ModelFacts(dtype=torch.bfloat16, head_dim=64)
    table = XpuPlatform().select_ops(facts, assume_missing=["triton.backends.intel"])
    rejected = table["rms_norm"].rejected[0]
    assert (rejected.candidate.family, rejected.reason) == ("triton", "triton.backends.intel not importable")


def test_render_lists_every_op_and_every_reason() -> None:
    table = CudaPlatform().select_ops(
        ModelFacts(dtype=torch.bfloat16, head_dim=16), assume_missing=["triton", "flashinfer"]
    )
    text = table.render()
    assert text.splitlines()[0].startswith("cuda: not available here")
    assert all(op in text for op in REFERENCE_OPS)
    assert "triton: triton not importable" in text
