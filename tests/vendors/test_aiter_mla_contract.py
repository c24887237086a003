"""AITER's `mla_decode_fwd` contract, against the stand-in that encodes it (its rules and the
commit they were read from are in `aiter_mla_standin`'s docstring): the stand-in rejects the
wrong calls an adapter could make, the adapter calls it as upstream SGLang's aiter backend does,
and the family declares what the kernels take. Op parity of the adapter's outputs is
`test_vendor_parity`'s (the DeepSeek-shaped `mla_cases.VENDOR_CASES`). Nothing here runs AITER's
kernels or a device."""

from __future__ import annotations

import types

import pytest
import torch

from sglang.ci.suites import mla_cases
from sglang.ops.selection import SelectionContext, ineligibility
from sglang.platforms.kernels.registry import family

from . import aiter_mla_standin, aiter_standin
from .aiter_mla_standin import KV_LORA_RANK, ROPE_DIM
from .standin import ContractError, Recorder, installed

ADAPTER = "sglang.platforms.kernels.aiter"
CANDIDATE = next(c for c in family("aiter").candidates if c.op == "mla_backend")
SCALE = 0.125
HEADS = 8
INT = torch.int32
WIDTH = KV_LORA_RANK + ROPE_DIM


def _call(**changes) -> tuple[dict, torch.Tensor]:
    """The documented call for two decode rows of 3 and 2 tokens over a 6-slot pool (`changes`
    replace arguments), and the output it wrote."""
    gen = torch.Generator().manual_seed(0)
    pool = torch.randn(6, 1, 1, WIDTH, generator=gen).to(torch.bfloat16)
    args = dict(
        q=torch.randn(2, HEADS, WIDTH, generator=gen).to(torch.bfloat16),
        kv_buffer=pool,
        o=torch.empty(2, HEADS, KV_LORA_RANK, dtype=torch.bfloat16),
        qo_indptr=torch.tensor([0, 1, 2], dtype=INT),
        kv_indptr=torch.tensor([0, 3, 5], dtype=INT),
        kv_indices=torch.tensor([4, 0, 2, 5, 1], dtype=INT),
        kv_last_page_lens=torch.ones(2, dtype=INT),
        max_seqlen_q=1,
        sm_scale=SCALE,
    )
    args.update(changes)
    aiter_mla_standin.build(Recorder())(**args)
    return args, args["o"]


def _by_hand(args: dict) -> torch.Tensor:
    """Absorbed MLA written out: each row's query against its slots' rows, values their first 512."""
    rows = args["kv_buffer"].flatten(0, 2).float()
    slots = ([4, 0, 2], [5, 1])
    out = []
    for i, own in enumerate(slots):
        scores = args["q"][i].float() @ rows[list(own)].T * SCALE
        out.append(scores.softmax(-1) @ rows[list(own), :KV_LORA_RANK])
    return torch.stack(out)


def test_standin_computes_latent_attention_into_o() -> None:
    args, out = _call()
    torch.testing.assert_close(out.float(), _by_hand(args), atol=2e-2, rtol=2e-2)


def test_an_indptr_off_by_one_gives_another_result() -> None:
    """A row boundary moved by one (an adapter's off-by-one) is a valid call with other rows, so
    op parity is what catches it."""
    args, out = _call(kv_indptr=torch.tensor([0, 2, 5], dtype=INT))
    assert not torch.allclose(out.float(), _by_hand(args), atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"o": torch.empty(2, HEADS, WIDTH, dtype=torch.bfloat16)}, "o is"),
        ({"q": torch.zeros(2, HEADS, WIDTH, dtype=torch.float16)}, "q: dtype"),
        ({"q": torch.zeros(2, 2 * HEADS, WIDTH, dtype=torch.bfloat16)[:, ::2]}, "Q.is_contiguous"),
        ({"kv_buffer": torch.zeros(6, 1, WIDTH, dtype=torch.bfloat16)}, "kv_buffer: 3-D"),
        ({"kv_buffer": torch.zeros(3, 1, 2, WIDTH, dtype=torch.bfloat16)}, "num_kv_heads==1"),
        ({"kv_indptr": torch.tensor([0, 3, 5])}, "kv_indptr: dtype"),
        ({"kv_indices": torch.tensor([4, 0, 2], dtype=INT)}, "kv_indices holds"),
        ({"logit_cap": 30.0}, "logit_cap"),
        ({"num_kv_splits": 4}, "AITER picks"),
        ({"sm_scale": None}, "sm_scale"),
    ],
    ids=[
        "o-576-wide",
        "fp16",
        "q-strided",
        "kv-3d",
        "two-kv-heads",
        "int64-indptr",
        "short-indices",
        "logit-cap",
        "splits",
        "no-scale",
    ],
)
def test_standin_rejects_what_the_kernel_refuses(changes: dict, message: str) -> None:
    with pytest.raises(ContractError, match=message):
        _call(**changes)


def test_standin_has_no_kernel_for_64_heads() -> None:
    """gfx942's table has no bf16 single-token decode kernel for 64 heads (gfx950's has)."""
    with pytest.raises(ContractError, match="64 heads"):
        _call(
            q=torch.zeros(2, 64, WIDTH, dtype=torch.bfloat16), o=torch.empty(2, 64, KV_LORA_RANK, dtype=torch.bfloat16)
        )


def test_adapter_calls_as_upstream(monkeypatch) -> None:
    """Decode rows only (the prefix step's one-token row, then every row of the decode step),
    pages of one token over the whole pool, each row's KV length, the layer's heads."""
    recorder = Recorder()
    scenario = mla_cases.build("decode", "deepseek", 16, torch.bfloat16, torch.Generator().manual_seed(1))
    with installed(monkeypatch, aiter_standin.build(recorder), ADAPTER):
        from sglang.platforms.kernels.aiter.mla import AiterMLA

        mla_cases.run(AiterMLA, scenario)
    calls = [args for name, args in recorder.calls if name == "mla_decode_fwd"]
    assert [c["kv_lens"] for c in calls] == [[1], list(scenario.step.seq_lens)]
    assert {(c["heads"], c["page_size"]) for c in calls} == {(HEADS, 1)}


def test_adapter_refuses_other_latent_widths(monkeypatch) -> None:
    with installed(monkeypatch, aiter_standin.build(Recorder()), ADAPTER):
        from sglang.platforms.kernels.aiter.mla import AiterMLA

        with pytest.raises(ValueError, match="kv_lora_rank 512"):
            AiterMLA(HEADS, 256, 64, torch.bfloat16, torch.device("cpu"))


@pytest.mark.parametrize(
    ("context", "reason"),
    [
        (SelectionContext(torch.bfloat16, WIDTH, 16, 1, device_arch="gfx942"), None),
        (SelectionContext(torch.bfloat16, WIDTH, 128, 64, device_arch="gfx950"), None),
        (SelectionContext(torch.float16, WIDTH, 16), "dtype float16 not supported"),
        (SelectionContext(torch.bfloat16, 320, 16), "head dim 320 not supported"),
        (SelectionContext(torch.bfloat16, WIDTH, 64), "GQA ratio 64 not supported"),
        (SelectionContext(torch.bfloat16, WIDTH, 4), "GQA ratio 4 not supported"),
        (SelectionContext(torch.bfloat16, WIDTH, 16, device_arch="gfx90a"), "device arch gfx90a not supported"),
    ],
    ids=["gfx942-16", "gfx950-128-page64", "fp16", "rank-256", "64-heads", "4-heads", "gfx90a"],
)
def test_declared_requirements(context: SelectionContext, reason: str | None) -> None:
    """bf16 rows of 576, a kernel's head count per rank (MLA has one KV head), gfx942/gfx950; any
    page size (the adapter hands over pages of one token)."""
    declined = ineligibility(CANDIDATE, context)
    assert declined is None if reason is None else reason in (declined or ""), declined


def test_rocm_reports_the_gfx_arch(monkeypatch) -> None:
    from sglang.platforms.rocm.platform import RocmPlatform

    props = types.SimpleNamespace(gcnArchName="gfx942:sramecc+:xnack-")
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
    assert RocmPlatform().device_arch() == "gfx942"
