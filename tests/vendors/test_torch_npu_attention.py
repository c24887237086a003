"""torch_npu's paged attention and SiLU-and-mul against the stand-in, held to Ascend's API pages
(the rules and the op-plugin commit they were read from are in `torch_npu_standin`'s docstring).

Three readings were wrong before:
- the family declared pages of 16 to 512 tokens in steps of 16, but the operator's prefill branch
  (several query tokens) takes a block table only with blocks of 128 to 512 in steps of 128;
- rows with one new token outside an all-decode step (the decode rows of a mixed step, and every
  decode row of a sliding-window layer) ran one BSND call each with the compressed 2048x2048
  mask and `sparse_mode` 3 or 4, which the decode branch ignores: it reads the mask as a
  `(B, KV_S)` mask, and a window was dropped;
- `npu_swiglu` takes no non-contiguous input, and the adapter passed any view through.
Outputs are compared with our reference each time; nothing here runs torch_npu or a device.
"""

from __future__ import annotations

import pytest
import torch

from sglang.ci.suites import paged_attention_cases as pac
from sglang.ci.suites.devices import assert_close
from sglang.ops.binding import load
from sglang.ops.selection import SelectionContext, ineligibility
from sglang.platforms.kernels.registry import family

from . import torch_npu_standin
from .standin import ContractError, Recorder, installed, run_paged_attention

PACKAGE = "sglang.platforms.kernels.torch_npu"
ATTENTION = next(c for c in family("torch_npu").candidates if c.op == "attention_backend")
SILU_AND_MUL = next(c for c in family("torch_npu").candidates if c.op == "silu_and_mul")
CASES = (
    *((s, "gqa", 128) for s in ("prefill_ragged", "cached_prefix", "decode", "mixed")),
    *((s, "gqa_window", 128) for s in ("cached_prefix", "mixed")),
    ("decode", "gqa8_window", 128),
    ("mixed", "gqa7_d128", 256),
    ("cached_prefix", "gqa5_d256", 512),
)
"""The short scenarios at the smallest page the prefill branch takes; windows where the branch
split matters (mixed steps, windowed decodes); real shapes at larger pages."""


def _run(monkeypatch, scenario: str, layer: str, page_size: int) -> Recorder:
    return run_paged_attention(monkeypatch, torch_npu_standin, PACKAGE, ATTENTION, scenario, layer, page_size, seed=11)


@pytest.mark.parametrize(
    ("scenario", "layer", "page_size"), [pytest.param(*c, id=f"{c[0]}-{c[1]}-page{c[2]}") for c in CASES]
)
def test_parity_at_the_page_sizes_the_prefill_branch_takes(monkeypatch, scenario, layer, page_size) -> None:
    heads, kv_heads, dim = pac.LAYERS[layer][:3]
    assert ineligibility(ATTENTION, SelectionContext(torch.bfloat16, dim, heads // kv_heads, page_size)) is None
    assert _run(monkeypatch, scenario, layer, page_size).calls


@pytest.mark.parametrize("page_size", [16, 64])
def test_pages_the_prefill_branch_refuses_are_declared_ineligible(monkeypatch, page_size: int) -> None:
    reason = ineligibility(ATTENTION, SelectionContext(torch.bfloat16, 64, 4, page_size))
    assert reason is not None and "page size" in reason
    with pytest.raises(ContractError, match=r"128\.\.512 in steps of 128"):
        _run(monkeypatch, "cached_prefix", "gqa", page_size)


@pytest.mark.parametrize("layer", ["gqa", "gqa_window"])
def test_one_token_rows_of_a_mixed_step_take_the_decode_branch(monkeypatch, layer: str) -> None:
    recorder = _run(monkeypatch, "mixed", layer, 128)
    seq_lens, extend_lens = pac.SCENARIOS["mixed"]
    step = [args for name, args in recorder.calls if name == "npu_fused_infer_attention_score"][-4:]
    decode = [args for args in step if args["layout"] == "BSH"]
    assert len(decode) == 1, "one batched decode call for the one-token rows"
    assert decode[0]["lengths"] == [s for s, e in zip(seq_lens, extend_lens) if e == 1]
    assert decode[0]["masked"] == (layer == "gqa_window"), "only a window needs the (B, KV_S) mask"
    prefill = [args for args in step if args["layout"] == "BSND"]
    assert [a["lengths"] for a in prefill] == [[s] for s, e in zip(seq_lens, extend_lens) if e > 1]


def test_windowed_decode_keeps_its_window(monkeypatch) -> None:
    """The decode branch ignores sparse modes and pre_tokens: the window rides in the mask."""
    recorder = _run(monkeypatch, "decode", "gqa_window", 128)
    call = recorder.last("npu_fused_infer_attention_score")
    assert (call["layout"], call["masked"], call["sparse_mode"]) == ("BSH", True, None)


def test_silu_and_mul_hands_swiglu_a_contiguous_input(monkeypatch) -> None:
    recorder = Recorder()
    wide = torch.randn(5, 96, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    view = wide[:, :64]
    assert not view.is_contiguous()
    with installed(monkeypatch, torch_npu_standin.build(recorder), PACKAGE):
        out = load(SILU_AND_MUL)(view)
    gate, up = view.float().chunk(2, dim=-1)
    assert_close(out, (torch.nn.functional.silu(gate) * up).to(torch.bfloat16), torch.bfloat16, "silu_and_mul")
    assert recorder.names() == ["npu_swiglu"]
