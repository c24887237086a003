"""AITER's paged attention against the stand-in, held to ROCm/aiter's own sources (the rules and
the commit they were read from are in `aiter_standin`'s docstring).

Two readings were wrong before: the family declared no page sizes, so a pool of 64-token pages
bound AITER, whose ragged decode kernel asserts at most 32 tokens per page; and the decode
workspace held its partial outputs as float32, twice what the kernel carves out of it (they are
in the query's dtype). Nothing here runs AITER's kernels or a device.
"""

from __future__ import annotations

import pytest
import torch

from sglang.ops.selection import SelectionContext, ineligibility
from sglang.platforms.kernels.registry import family

from . import aiter_standin
from .standin import ContractError, Recorder, run_paged_attention

PACKAGE = "sglang.platforms.kernels.aiter"
CANDIDATE = next(c for c in family("aiter").candidates if c.op == "attention_backend")


def _run_decode(monkeypatch, page_size: int, layer: str = "gqa_d64") -> Recorder:
    """Runs the decode scenario through the adapter at `page_size`, whatever the family
    declares, and checks it against the reference."""
    return run_paged_attention(monkeypatch, aiter_standin, PACKAGE, CANDIDATE, "decode", layer, page_size, seed=5)


@pytest.mark.parametrize("page_size", [64, 128])
def test_pages_over_32_tokens_are_declared_ineligible(page_size: int) -> None:
    reason = ineligibility(CANDIDATE, SelectionContext(torch.bfloat16, 128, 4, page_size))
    assert reason is not None and "page size" in reason


def test_the_ragged_kernel_rejects_pages_over_32_tokens(monkeypatch) -> None:
    """What the declaration keeps away: the stand-in refuses the call the kernel cannot compile."""
    with pytest.raises(ContractError, match="block_size 64"):
        _run_decode(monkeypatch, 64)


@pytest.mark.parametrize("page_size", [1, 32])
def test_decode_workspace_is_sized_as_the_kernel_carves_it(monkeypatch, page_size: int) -> None:
    assert ineligibility(CANDIDATE, SelectionContext(torch.bfloat16, 64, 4, page_size)) is None
    call = _run_decode(monkeypatch, page_size).last("paged_attention_ragged")
    assert call["block_size"] == page_size
    assert call["workspace_bytes"] == call["needed_bytes"], "partial outputs are in the query's dtype"
