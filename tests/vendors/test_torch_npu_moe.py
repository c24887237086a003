"""The torch_npu MoE adapters' calls, against the recording torch_npu stand-in.

Op parity of both candidates runs in test_vendor_parity.py over every MoE case; this file checks
the calls themselves: their order, and the host and device arguments of each as Ascend documents
them. Nothing here runs an NPU kernel.
"""

from __future__ import annotations

import pytest
import torch

from sglang import ops
from sglang.ci.suites.op_cases import CASES
from sglang.ops.binding import load
from sglang.ops.moe import moe_route as reference_route
from sglang.platforms.kernels.registry import family

from .standin import ContractError, Recorder, installed
from .torch_npu_standin import build

PACKAGE = "sglang.platforms.kernels.torch_npu"


def _case_args(name: str, dtype: torch.dtype) -> tuple:
    case = next(c for c in CASES if c.id == name)
    return case.make(torch.Generator().manual_seed(7), dtype)


@pytest.fixture
def npu(monkeypatch):
    recorder = Recorder()
    standin = build(recorder)
    with installed(monkeypatch, standin, PACKAGE):
        candidates = {c.op: c for c in family("torch_npu").candidates}
        yield recorder, standin["torch_npu"], lambda op: load(candidates[op])


def test_silu_experts_run_the_documented_chain(npu) -> None:
    recorder, _, candidate = npu
    x, w13, w2, weights, ids, act = _case_args("moe_experts-e8_top2", torch.bfloat16)
    tokens, top_k = ids.shape
    experts, inter, hidden = w13.shape[0], w2.shape[2], x.shape[1]
    out = candidate("moe_experts")(x, w13, w2, weights, ids, act)

    assert out.shape == x.shape and out.dtype == torch.bfloat16
    assert recorder.names() == [
        "npu_moe_init_routing",
        "npu_moe_compute_expert_tokens",
        "npu_grouped_matmul",
        "npu_swiglu",
        "npu_grouped_matmul",
        "npu_moe_finalize_routing",
    ]
    init = recorder.calls[0][1]
    assert init["expert_idx"] == {"dtype": torch.int32, "shape": (tokens, top_k), "device": "cpu"}
    assert init["active_num"] == tokens and type(init["active_num"]) is int, "active_num is a host int"
    assert recorder.calls[1][1]["num_expert"] == experts
    gate_up, down = recorder.calls[2][1], recorder.calls[4][1]
    assert gate_up["weight"][0]["shape"] == (experts, hidden, 2 * inter), "w13 goes as [E, K, N]"
    assert down["weight"][0]["shape"] == (experts, inter, hidden), "w2 goes as [E, K, N]"
    assert not gate_up["weight_contiguous"], "the weights go as transposed views, never copied"
    assert gate_up["group_list"] == {"dtype": torch.int64, "shape": (experts,), "device": "cpu"}
    assert (gate_up["split_item"], gate_up["group_type"], gate_up["group_list_type"]) == (2, 0, 0)
    assert gate_up["x"][0]["shape"] == (tokens * top_k, hidden), "every (token, expert) pair is computed"
    final = recorder.calls[5][1]
    assert final["scales"] == {"dtype": torch.bfloat16, "shape": (tokens, top_k), "device": "cpu"}
    assert final["expanded_src_to_dst_row"]["shape"] == (tokens * top_k,)


def test_other_activations_take_the_bound_op(npu, monkeypatch) -> None:
    recorder, _, candidate = npu
    x, w13, w2, weights, ids, act = _case_args("moe_experts-gelu_top3", torch.float32)
    seen: list[tuple[int, ...]] = []
    bound = ops.gelu_and_mul

    def recording_gelu(t: torch.Tensor) -> torch.Tensor:
        seen.append(tuple(t.shape))
        return bound(t)

    monkeypatch.setattr(ops, "gelu_and_mul", recording_gelu)
    candidate("moe_experts")(x, w13, w2, weights, ids, act)
    assert "npu_swiglu" not in recorder.names() and recorder.names().count("npu_grouped_matmul") == 2
    assert seen == [(ids.numel(), w13.shape[1])], "the bound gelu_and_mul ran once, over every expanded row"


def test_softmax_routing_calls_the_gating_op(npu) -> None:
    recorder, _, candidate = npu
    logits, top_k, scoring, renormalize = _case_args("moe_route-softmax_top2", torch.bfloat16)
    weights, ids = candidate("moe_route")(logits, top_k, scoring, renormalize)
    call = recorder.last("npu_moe_gating_top_k_softmax")
    assert call["k"] == top_k and call["finished"] is None
    assert call["x"] == {"dtype": torch.bfloat16, "shape": tuple(logits.shape), "device": "cpu"}
    assert weights.dtype == torch.float32 and ids.dtype == torch.int64
    torch.testing.assert_close(weights.sum(-1), torch.ones(logits.shape[0]))


def test_sigmoid_routing_takes_the_reference(npu) -> None:
    recorder, _, candidate = npu
    args = _case_args("moe_route-sigmoid_top3", torch.float32)
    weights, ids = candidate("moe_route")(*args)
    expected_weights, expected_ids = reference_route(*args)
    assert recorder.calls == [], "the gating op scores by softmax only"
    assert torch.equal(ids, expected_ids) and torch.equal(weights, expected_weights)


def test_standin_refuses_calls_off_the_contract(npu) -> None:
    """The stand-in is not vacuous: row indices in the wrong layout, and a renamed keyword, fail."""
    _, torch_npu, _ = npu
    x = torch.randn(3, 8)
    expert_idx = torch.tensor([[1, 2], [0, 1], [0, 2]], dtype=torch.int32)
    row_major = torch.arange(6, dtype=torch.int32).view(3, 2)
    with pytest.raises(ContractError, match="gating layout"):
        torch_npu.npu_moe_init_routing(x, row_major, expert_idx, 3)
    with pytest.raises(ContractError, match="host int"):
        torch_npu.npu_moe_init_routing(x, row_major.view(2, 3).t(), expert_idx, torch.tensor(3))
    rows, scales = torch.randn(6, 8), torch.rand(3, 2)
    src_to_dst = torch.arange(6, dtype=torch.int32)
    with pytest.raises(TypeError):
        torch_npu.npu_moe_finalize_routing(rows, None, None, None, scales, src_to_dst, expert_for_source_row=expert_idx)
