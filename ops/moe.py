"""Mixture of experts: routing (top-k over router logits, plain or grouped with a selection bias)
and the gated-MLP expert computation.

Kept apart from any token dispatch or communication, so expert parallelism can wrap these two.
Expert weights are stacked: `w13` `[E, 2 * I, H]` holds each expert's `[gate | up]` projection,
`w2` `[E, H, I]` its down projection.
"""

from __future__ import annotations

import torch

from sglang.ops import activation


def moe_route(
    router_logits: torch.Tensor, top_k: int, scoring: str = "softmax", renormalize: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns `(weights [T, k] float32, expert_ids [T, k] int64)`.

    `scoring` is `softmax` (Mixtral, Qwen-MoE) or `sigmoid` (DeepSeek-V3 style); with
    `renormalize` the k selected weights are rescaled to sum to one.
    """
    if scoring == "softmax":
        scores = router_logits.float().softmax(dim=-1)
    elif scoring == "sigmoid":
        scores = router_logits.float().sigmoid()
    else:
        raise ValueError(f"unknown MoE scoring function {scoring!r}")
    weights, ids = scores.topk(top_k, dim=-1)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, ids


def _check_groups(scores: torch.Tensor, num_groups: int, min_size: int) -> None:
    """Raises ValueError unless the experts (`scores`' last dim) split into `num_groups` equal
    groups of at least `min_size`. Skipped under `torch.jit.trace`, where a shape reads as a
    tensor and a Python branch on it fails the capture (cpu's captured decode): the bucket's
    eager run just before the trace checks the same shapes."""
    if torch.jit.is_tracing():
        return
    num_experts = scores.shape[-1]
    if num_experts % num_groups or num_experts // num_groups < min_size:
        raise ValueError(f"{num_experts} experts do not split into {num_groups} groups of at least {min_size}")


def _chosen(group_scores: torch.Tensor, best_groups: torch.Tensor) -> torch.Tensor:
    """`[T, G]` bool, True at each token's `best_groups`. Scattered as floats: TorchScript (cpu's
    traced decode) has no `scatter_` overload for a bool value."""
    return torch.zeros_like(group_scores).scatter_(1, best_groups, 1.0).bool()


def moe_route_grouped(
    router_logits: torch.Tensor,
    correction_bias: torch.Tensor,
    top_k: int,
    num_groups: int,
    topk_groups: int,
    renormalize: bool = True,
    scaling: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """DeepSeek-V3 / GLM-4-MoE routing: sigmoid scores, selected among the best groups, with a
    bias that steers selection only. Returns `(weights [T, k] float32, expert_ids [T, k] int64)`.

    Experts are split into `num_groups` contiguous groups; a group's score is the sum of its two
    best `sigmoid(logit) + correction_bias`. The `top_k` experts are chosen by that biased score
    among the `topk_groups` best groups, and weighted by their unbiased score (rescaled to sum to
    one with `renormalize`), times `scaling` (`routed_scaling_factor`). Static shapes throughout.
    """
    scores = router_logits.float().sigmoid()
    _check_groups(scores, num_groups, min_size=2)
    choice = scores + correction_bias.float()
    grouped = choice.unflatten(-1, (num_groups, -1))
    group_scores = grouped.topk(2, dim=-1).values.sum(dim=-1)
    best_groups = group_scores.topk(topk_groups, dim=-1).indices
    group_mask = _chosen(group_scores, best_groups)
    expert_mask = group_mask.unsqueeze(-1).expand_as(grouped).flatten(-2)
    ids = choice.masked_fill(~expert_mask, float("-inf")).topk(top_k, dim=-1).indices
    weights = scores.gather(1, ids)
    if renormalize:
        weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
    return weights * scaling, ids


def moe_route_group_limited(
    router_logits: torch.Tensor,
    top_k: int,
    num_groups: int,
    topk_groups: int,
    renormalize: bool = False,
    scaling: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """DeepSeek-V2's `group_limited_greedy` routing: softmax scores; a group's score is its best
    expert's; the `top_k` experts are the best among the `topk_groups` best groups, weighted by
    their softmax score (rescaled to sum to one with `renormalize`), times `scaling`.
    Returns `(weights [T, k] float32, expert_ids [T, k] int64)`. Static shapes throughout."""
    scores = router_logits.float().softmax(dim=-1)
    _check_groups(scores, num_groups, min_size=1)
    grouped = scores.unflatten(-1, (num_groups, -1))
    group_scores = grouped.amax(dim=-1)
    group_mask = _chosen(group_scores, group_scores.topk(topk_groups, dim=-1).indices)
    expert_mask = group_mask.unsqueeze(-1).expand_as(grouped).flatten(-2)
    weights, ids = scores.masked_fill(~expert_mask, 0.0).topk(top_k, dim=-1)
    if renormalize:
        weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
    return weights * scaling, ids


def moe_experts(
    x: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    weights: torch.Tensor,
    expert_ids: torch.Tensor,
    activation_name: str = "silu",
    w13_bias: torch.Tensor | None = None,
    w2_bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """`sum_k weights[t, k] * expert_{ids[t, k]}(x[t])` for every token `t`.

    `w13_bias` `[E, 2 * I]` and `w2_bias` `[E, H]` are the experts' biases where they have them
    (gpt-oss; only candidates that declare the `expert_bias` feature are handed them).
    The reference runs every expert on every token and weights the result by a dense
    `[T, E]` routing matrix: static shapes, simple, and exactly the definition.
    """
    gated = getattr(activation, activation.GATED_ACTIVATIONS[activation_name])
    num_experts = w13.shape[0]
    dense = torch.zeros(x.shape[0], num_experts, dtype=torch.float32, device=x.device)
    dense.scatter_add_(1, expert_ids, weights.float())
    projected = torch.einsum("th,eih->eti", x, w13)
    if w13_bias is not None:
        projected = projected + w13_bias[:, None, :]
    expert_out = torch.einsum("eti,ehi->eth", gated(projected), w2)
    if w2_bias is not None:
        expert_out = expert_out + w2_bias[:, None, :]
    return torch.einsum("eth,te->th", expert_out.float(), dense).to(x.dtype)
