"""The MoE references (routing, gated-MLP experts) against hand computation."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from sglang.ops.activation import gelu_and_mul, silu_and_mul
from sglang.ops.moe import moe_experts, moe_route, moe_route_group_limited, moe_route_grouped

LOGITS = torch.tensor([[1.0, 2.0, 3.0, 0.0], [0.5, -1.0, 0.0, 4.0]])


def sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))


@pytest.mark.parametrize("renormalize", [True, False])
def test_softmax_route_by_hand(renormalize: bool) -> None:
    weights, ids = moe_route(LOGITS, top_k=2, scoring="softmax", renormalize=renormalize)
    assert ids.tolist() == [[2, 1], [3, 0]]
    expected = []
    for row, picked in zip(LOGITS.tolist(), ids.tolist()):
        exps = [math.exp(x) for x in row]
        denominator = sum(exps[i] for i in picked) if renormalize else sum(exps)
        expected.append([exps[i] / denominator for i in picked])
    assert weights.dtype == torch.float32
    torch.testing.assert_close(weights, torch.tensor(expected))


@pytest.mark.parametrize("renormalize", [True, False])
def test_sigmoid_route_by_hand(renormalize: bool) -> None:
    weights, ids = moe_route(LOGITS, top_k=3, scoring="sigmoid", renormalize=renormalize)
    assert ids.tolist() == [[2, 1, 0], [3, 0, 2]]
    expected = []
    for row, picked in zip(LOGITS.tolist(), ids.tolist()):
        scores = [sigmoid(row[i]) for i in picked]
        total = sum(scores) if renormalize else 1.0
        expected.append([s / total for s in scores])
    torch.testing.assert_close(weights, torch.tensor(expected))


def test_unknown_scoring_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown MoE scoring function 'relu'"):
        moe_route(LOGITS, top_k=1, scoring="relu")


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def silu(x: torch.Tensor) -> torch.Tensor:
    return x / (1 + torch.exp(-x))


def test_gated_activations_by_formula() -> None:
    x = torch.randn(3, 2 * 10, dtype=torch.float64)
    gate, up = x[:, :10], x[:, 10:]
    torch.testing.assert_close(silu_and_mul(x), silu(gate) * up)
    torch.testing.assert_close(gelu_and_mul(x), gelu_tanh(gate) * up)


@pytest.mark.parametrize(("activation", "act"), [("silu", silu), ("gelu_pytorch_tanh", gelu_tanh)])
def test_experts_by_token_loop(activation: str, act) -> None:
    """`sum_k w[t,k] * W2_e (act(Wg_e x) * (Wu_e x))`, one token and one expert at a time, float64."""
    tokens, experts, hidden, inter, top_k = 6, 5, 8, 12, 2
    x = torch.randn(tokens, hidden)
    w13 = torch.randn(experts, 2 * inter, hidden) / hidden**0.5
    w2 = torch.randn(experts, hidden, inter) / inter**0.5
    weights, ids = moe_route(torch.randn(tokens, experts), top_k)

    expected = torch.zeros(tokens, hidden, dtype=torch.float64)
    for t in range(tokens):
        for k in range(top_k):
            e = int(ids[t, k])
            gate_up = w13[e].double() @ x[t].double()
            expert_out = w2[e].double() @ (act(gate_up[:inter]) * gate_up[inter:])
            expected[t] += float(weights[t, k]) * expert_out
    out = moe_experts(x, w13, w2, weights, ids, activation)
    assert out.dtype == x.dtype
    torch.testing.assert_close(out.double(), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("renormalize", [True, False])
def test_grouped_route_matches_transformers_router(renormalize: bool) -> None:
    """`moe_route_grouped` against GLM-4-MoE's router in transformers (DeepSeek-V3's routing):
    16 experts in 4 groups, 2 groups searched, a selection bias large enough to change choices."""
    from transformers import Glm4MoeConfig
    from transformers.models.glm4_moe.modeling_glm4_moe import Glm4MoeTopkRouter

    config = Glm4MoeConfig(
        hidden_size=32, n_routed_experts=16, num_experts_per_tok=3, n_group=4, topk_group=2,
        norm_topk_prob=renormalize, routed_scaling_factor=2.5,
    )  # fmt: skip
    generator = torch.Generator().manual_seed(5)
    router = Glm4MoeTopkRouter(config)
    with torch.no_grad():
        router.weight.copy_(torch.randn(16, 32, generator=generator) / 4)
        router.e_score_correction_bias.copy_(0.3 * torch.randn(16, generator=generator))
    x = torch.randn(40, 32, generator=generator)
    logits, hf_weights, hf_ids = router(x)
    bias = router.e_score_correction_bias
    weights, ids = moe_route_grouped(logits, bias, 3, 4, 2, renormalize, 2.5)
    order, hf_order = ids.sort(dim=-1), hf_ids.sort(dim=-1)
    assert torch.equal(order.values, hf_order.values)
    torch.testing.assert_close(weights.gather(1, order.indices), hf_weights.gather(1, hf_order.indices))
    unbiased_ids = moe_route_grouped(logits, torch.zeros_like(bias), 3, 4, 2, renormalize, 2.5)[1]
    assert not torch.equal(unbiased_ids.sort(dim=-1).values, order.values), "the bias changed no choice"


@pytest.mark.parametrize(
    "route",
    [
        pytest.param(lambda x, bias: moe_route_grouped(x, bias, 2, 4, 2, scaling=2.5), id="grouped"),
        pytest.param(lambda x, bias: moe_route_group_limited(x, 2, 4, 1, scaling=2.0), id="group-limited"),
    ],
)
def test_grouped_routes_trace_without_baking_in_the_routing(route) -> None:
    """cpu's captured decode traces the step with tracer warnings as errors (a warning means a
    tensor's value became a Python constant). Grouped routing (GLM-4-MoE, DeepSeek V2/V3) branched
    on a traced shape and scattered a bool, so every such model's first captured decode step
    raised; the traced routing must also follow new logits, not replay the traced ones."""
    generator = torch.Generator().manual_seed(0)
    bias = torch.randn(8, generator=generator)
    with warnings.catch_warnings():
        warnings.simplefilter("error", torch.jit.TracerWarning)
        traced = torch.jit.trace(lambda x: route(x, bias), (torch.randn(3, 8, generator=generator),))
    logits = torch.randn(3, 8, generator=generator)
    for got, expected in zip(traced(logits), route(logits, bias), strict=True):
        torch.testing.assert_close(got, expected)
