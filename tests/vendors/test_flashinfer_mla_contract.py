"""FlashInfer's MLA wrapper contract, against the stand-in that encodes it: the stand-in rejects
the wrong calls an adapter could make (plan arguments out of order, the caches split at the wrong
column), and the adapter plans what `BatchMLAPagedAttentionWrapper.plan` documents. Op parity of
the adapter's outputs is `test_vendor_parity`'s (the DeepSeek-shaped `mla_cases.VENDOR_CASES`)."""

from __future__ import annotations

import pytest
import torch

from sglang.ci.suites import mla_cases

from . import flashinfer_standin
from .flashinfer_mla_standin import HEAD_DIM_CKV, HEAD_DIM_KPE, WORKSPACE_BYTES
from .standin import ContractError, Recorder, installed

ADAPTER = "sglang.platforms.kernels.flashinfer"
SCALE = 0.125
PAGE = 4
INT = torch.int32


@pytest.fixture(scope="module")
def workspace() -> torch.Tensor:
    """One 128 MB workspace for the module's direct wrapper calls (allocating it costs ~0.1 s)."""
    return torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8)


def _wrapper(workspace: torch.Tensor):
    return flashinfer_standin.build(Recorder())["flashinfer"].BatchMLAPagedAttentionWrapper(workspace)


def _plan_args(kv_len: int = 6) -> list:
    """One decode row of `kv_len` tokens on pages 2 and 0, in `plan`'s documented order."""
    return [
        torch.tensor([0, 1], dtype=INT),  # qo_indptr
        torch.tensor([0, 2], dtype=INT),  # kv_indptr
        torch.tensor([2, 0], dtype=INT),  # kv_indices
        torch.tensor([kv_len], dtype=INT),  # kv_len_arr
        2,  # num_heads
        HEAD_DIM_CKV,
        HEAD_DIM_KPE,
        PAGE,
        False,  # causal
        SCALE,
        torch.bfloat16,
        torch.bfloat16,
    ]


def _swapped(args: list, i: int, j: int) -> list:
    args = list(args)
    args[i], args[j] = args[j], args[i]
    return args


@pytest.mark.parametrize(
    ("first", "second"),
    [(2, 3), (5, 6), (8, 9), (1, 2)],
    ids=["kv_indices-kv_len_arr", "ckv-kpe", "causal-sm_scale", "kv_indptr-kv_indices"],
)
def test_standin_rejects_plan_arguments_out_of_order(first: int, second: int, workspace) -> None:
    wrapper = _wrapper(workspace)
    wrapper.plan(*_plan_args())  # the documented order plans
    with pytest.raises(ContractError):
        wrapper.plan(*_swapped(_plan_args(), first, second))


def test_standin_rejects_lengths_its_pages_cannot_hold(workspace) -> None:
    with pytest.raises(ContractError, match="kv_len 9, 2 pages"):
        _wrapper(workspace).plan(*_plan_args(kv_len=9))


def test_standin_computes_latent_attention_and_sees_a_wrong_split(workspace) -> None:
    """The stand-in's result is absorbed MLA written out by hand; the same pool split at the wrong
    column (the rotary part first) gives another result, so op parity catches that adapter bug."""
    gen = torch.Generator().manual_seed(0)
    pool = torch.randn(3, PAGE, HEAD_DIM_CKV + HEAD_DIM_KPE, generator=gen).to(torch.bfloat16)
    q_nope = torch.randn(1, 2, HEAD_DIM_CKV, generator=gen).to(torch.bfloat16)
    q_pe = torch.randn(1, 2, HEAD_DIM_KPE, generator=gen).to(torch.bfloat16)
    wrapper = _wrapper(workspace)
    wrapper.plan(*_plan_args())
    out = wrapper.run(q_nope, q_pe, pool[..., :HEAD_DIM_CKV], pool[..., HEAD_DIM_CKV:])

    rows = torch.cat([pool[2], pool[0]])[:6].float()  # pages 2 then 0, six tokens
    scores = (q_nope[0].float() @ rows[:, :HEAD_DIM_CKV].T + q_pe[0].float() @ rows[:, HEAD_DIM_CKV:].T) * SCALE
    expected = scores.softmax(-1) @ rows[:, :HEAD_DIM_CKV]
    torch.testing.assert_close(out[0].float(), expected, atol=2e-2, rtol=2e-2)

    wrong = wrapper.run(q_nope, q_pe, pool[..., HEAD_DIM_KPE:], pool[..., :HEAD_DIM_KPE])
    assert not torch.allclose(wrong[0].float(), expected, atol=2e-2, rtol=2e-2)
    with pytest.raises(ContractError, match="ckv_cache"):
        wrapper.run(q_nope, q_pe, pool, pool[..., HEAD_DIM_CKV:])


def test_adapter_plans_as_documented(monkeypatch) -> None:
    """Per step: one plan with every row's KV length, causal for extend, not for decode; the pool's
    page size; the absorbed query `[T, H, 512]`."""
    recorder = Recorder()
    scenario = mla_cases.build("decode", "deepseek", 1, torch.bfloat16, torch.Generator().manual_seed(1))
    with installed(monkeypatch, flashinfer_standin.build(recorder), ADAPTER):
        from sglang.platforms.kernels.flashinfer.mla import FlashInferMLA

        mla_cases.run(FlashInferMLA, scenario)
    plans = [args for name, args in recorder.calls if name == "mla.plan"]
    assert [p["causal"] for p in plans] == [True, False]
    assert plans[1]["kv_len_arr"] == list(scenario.step.seq_lens)
    assert plans[0]["kv_len_arr"] == list(scenario.prefix.seq_lens)
    assert {p["page_size"] for p in plans} == {1}
    assert recorder.names().count("mla.run") == 2


def test_adapter_refuses_other_latent_widths(monkeypatch) -> None:
    with installed(monkeypatch, flashinfer_standin.build(Recorder()), ADAPTER):
        from sglang.platforms.kernels.flashinfer.mla import FlashInferMLA

        with pytest.raises(ValueError, match="kv_lora_rank 512"):
            FlashInferMLA(4, 32, 8, torch.bfloat16, torch.device("cpu"))
