"""Sparse MoE experts: each expert runs only on the tokens routed to it."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from sglang.ops import activation
from sglang.ops.moe import moe_experts as reference_moe_experts


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
    """Runs each expert only on the tokens routed to it (sparse), accumulating in float32.

    The host reads which experts are hit, so this suits eager steps. A traced or compiled step
    (cpu's captured decode) would record one step's routing as constants and replay it for every
    later batch: there it runs the reference's dense form, whose shapes do not depend on routing.
    """
    if torch.jit.is_tracing() or torch.compiler.is_compiling():
        return reference_moe_experts(x, w13, w2, weights, expert_ids, activation_name, w13_bias, w2_bias)
    gated = getattr(activation, activation.GATED_ACTIVATIONS[activation_name])
    out = torch.zeros(x.shape[0], x.shape[1], dtype=torch.float32, device=x.device)
    flat_ids = expert_ids.flatten()
    order = flat_ids.argsort(stable=True)
    counts = torch.bincount(flat_ids, minlength=w13.shape[0]).tolist()
    token_of = order // expert_ids.shape[1]
    flat_weights = weights.flatten()[order]
    start = 0
    for expert, count in enumerate(counts):
        if count == 0:
            continue
        tokens = token_of[start : start + count]
        bias13 = None if w13_bias is None else w13_bias[expert]
        bias2 = None if w2_bias is None else w2_bias[expert]
        hidden = gated(F.linear(x[tokens], w13[expert], bias13))
        contribution = F.linear(hidden, w2[expert], bias2).float() * flat_weights[start : start + count, None]
        out.index_add_(0, tokens, contribution)
        start += count
    return out.to(x.dtype)
