"""Op parity of every vendor-family candidate against its recording stand-in, on cpu.

Each candidate of the flashinfer, aiter, torch_npu and xpu families runs over every parity case
of its op (`op_cases.CASES`, and `mla_cases.VENDOR_CASES` for MLA) with the vendor's import name
bound to a stand-in that checks the call against the vendor's documented contract and computes
with our reference. A pass says the adapter calls the vendor API as documented and maps its
results back correctly; it says nothing about the vendor's kernels or any device (the matrix
never counts this as a device column).

A case outside what the candidate declares (dtypes, head dims, GQA groups, page sizes) is skipped
with the declared reason: the stand-ins reject what the vendors reject, so such a case would only
test the stand-in. Device capability is not applied (there is no device).
"""

from __future__ import annotations

import zlib

import pytest
import torch

from sglang.ci.suites import mla_cases
from sglang.ci.suites import paged_attention_cases as pac
from sglang.ci.suites.op_cases import CASES, mla_case
from sglang.ci.suites.test_op_parity import case_facts
from sglang.ops.binding import REFERENCE_OPS, load, resolve
from sglang.ops.selection import SelectionContext, ineligibility
from sglang.platforms.kernels.registry import family

from .standin import Recorder, installed
from .vendors import VENDORS

DTYPES = (torch.float32, torch.bfloat16)
VENDOR_CASES = tuple(mla_case(*c) for c in mla_cases.VENDOR_CASES)
"""DeepSeek-shaped MLA cases: the only MLA widths some vendors take (never a device's op parity)."""
PAGED_OPS = ("attention_backend", "mla_backend")


def _params() -> list:
    params = []
    for name in VENDORS:
        for candidate in family(name).candidates:
            for case in (c for c in (*CASES, *VENDOR_CASES) if c.op == candidate.op):
                params.append(pytest.param(name, candidate, case, id=f"{name}-{case.id}"))
    return params


def _paged(backend_cls: type, page_size: int):
    """Builds the backend as the runtime does: constructed, then told the pool's page size."""

    def build(*args):
        backend = backend_cls(*args)
        backend.page_size = page_size
        return backend

    return build


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("vendor", "candidate", "case"), _params())
def test_vendor_adapter_parity(vendor, candidate, case, dtype, monkeypatch) -> None:
    spec = VENDORS[vendor]
    facts = case_facts(case, dtype)
    context = SelectionContext(dtype, facts.head_dim, facts.gqa_ratio, facts.page_size, features=case.features)
    declared = ineligibility(candidate, context)
    if declared is not None:
        pytest.skip(f"{vendor} {candidate.op}: declared: {declared}")
    recorder = Recorder()
    seed = zlib.crc32(f"{case.id}-{dtype}".encode())
    args = case.make(torch.Generator().manual_seed(seed), dtype)
    expected = case.call(resolve(REFERENCE_OPS[case.op]), args)
    with installed(monkeypatch, spec.build(recorder), spec.package):
        if not spec.serves(candidate, case, args):
            pytest.skip(f"{vendor} {candidate.op}: {case.id} is outside what the adapter hands the vendor")
        impl = load(candidate)
        if case.op in PAGED_OPS:
            impl = _paged(impl, case.page_size)
        torch.manual_seed(seed)
        actual = case.call(impl, args)
    case.check(actual, expected, args, dtype)
    assert recorder.calls or spec.may_skip_vendor(candidate, case, args), "the adapter never called the vendor"


def test_every_vendor_family_has_a_standin() -> None:
    assert set(VENDORS) == {"flashinfer", "aiter", "torch_npu", "ipex"}


def test_page_views_follow_the_slots() -> None:
    """The CSR view lists each sequence's pages in order, last page lengths within the page."""
    from sglang.platforms.kernels.page_views import block_table, csr_pages

    scenario = pac.build("mixed", "gqa", 16, torch.float32, torch.Generator().manual_seed(3))
    view = csr_pages(scenario.step, 16)
    indptr = view.indptr.tolist()
    starts = scenario.step.kv_starts
    for i, seq_len in enumerate(scenario.step.seq_lens):
        pages = view.indices[indptr[i] : indptr[i + 1]].long()
        slots = (pages[:, None] * 16 + torch.arange(16)).flatten()[:seq_len]
        assert torch.equal(slots, scenario.step.kv_slots[starts[i] : starts[i + 1]])
        assert 1 <= int(view.last_page_len[i]) <= 16
    table = block_table(scenario.step, 16, width=4)
    assert table.shape == (len(scenario.step.seq_lens), 4) and table.dtype == torch.int32
    assert torch.equal(table[0, : indptr[1]], view.indices[: indptr[1]])
