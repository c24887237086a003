"""MoE routing and experts through torch_npu's MoE operator chain.

Signatures follow Ascend's torch_npu API reference (the op-plugin `custom_APIs` pages, which
document the torch_npu 2.x line; these five calls read the same in the Ascend Extension for
PyTorch 6.0 and 7.0 API lists). They were not checked against an installed torch_npu.

`moe_route`: `npu_moe_gating_top_k_softmax(x, finished=None, k=...)` -> `(y, expert_idx,
row_idx)`: softmax over the experts, then top-k, values in `x`'s dtype and ids int32. Only
softmax scoring exists there; sigmoid scoring takes the reference.

`moe_experts`, dropless (every routed token is computed):
1. `npu_moe_init_routing(x, row_idx, expert_idx, active_num)` sorts the `T * k` (token, expert)
   pairs by expert (stable) and gathers `x` into that order. `row_idx` must be the gating op's
   layout, `row_idx[t, j] = j * T + t`: the operator finds a pair's token as `row_idx % T`, and
   `expanded_row_idx[j * T + t]` is where pair `(t, j)` landed.
2. `npu_moe_compute_expert_tokens(sorted_expert_ids, num_expert)`: per expert, the end of its
   rows in the sorted order (a cumulative count), which is the grouped matmul's `group_list`.
3. `npu_grouped_matmul([rows], [w13^T], group_list=..., group_type=0, group_list_type=0,
   split_item=2)`: one matmul per expert over its slice of rows (m-axis groups, cumulative
   group list, one output tensor). Our `[E, N, K]` weights go as transposed views `[E, K, N]`,
   which the operator takes without a copy.
4. The gated activation: `npu_swiglu` for SiLU (our `[gate | up]` halves are its layout), the
   bound op for other activations.
5. The down projection, the same grouped matmul over `w2^T`.
6. `npu_moe_finalize_routing(rows, skip1, skip2, bias, scales, expanded_src_to_dst_row,
   expert_for_source_row)`: `out[t] = sum_j scales[t, j] * rows[expanded_row_idx[j * T + t]]`.
   It is called positionally: its seventh parameter was renamed (`export_for_source_row`
   became `expert_for_source_row`) between releases. `scales` must have the rows' dtype.

Limits the candidate's requirements cannot state: at most 1024 experts (the grouped matmul's
group list) and `k <= 1024`.
"""

from __future__ import annotations

import torch
import torch_npu

from sglang import ops
from sglang.ops.activation import GATED_ACTIVATIONS
from sglang.ops.moe import moe_route as reference_moe_route


def moe_route(
    router_logits: torch.Tensor, top_k: int, scoring: str = "softmax", renormalize: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    if scoring != "softmax":
        return reference_moe_route(router_logits, top_k, scoring, renormalize)
    weights, expert_ids, _ = torch_npu.npu_moe_gating_top_k_softmax(router_logits, None, k=top_k)
    weights = weights.float()
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, expert_ids.long()


def _grouped_matmul(rows: torch.Tensor, weight: torch.Tensor, group_list: torch.Tensor) -> torch.Tensor:
    """`rows[i] @ weight[e].T` for each row `i` in expert `e`'s slice; `weight` is `[E, N, K]`."""
    (out,) = torch_npu.npu_grouped_matmul(
        [rows], [weight.transpose(1, 2)], group_list=group_list, split_item=2, group_type=0, group_list_type=0
    )
    return out


def moe_experts(
    x: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    weights: torch.Tensor,
    expert_ids: torch.Tensor,
    activation_name: str = "silu",
) -> torch.Tensor:
    tokens, top_k = expert_ids.shape
    expert_idx = expert_ids.to(torch.int32)
    row_idx = torch.arange(tokens * top_k, dtype=torch.int32, device=x.device).view(top_k, tokens).t().contiguous()
    rows, expanded_row_idx, sorted_experts = torch_npu.npu_moe_init_routing(
        x.contiguous(), row_idx=row_idx, expert_idx=expert_idx, active_num=tokens
    )
    # The grouped matmul reads its group list as int64; the count operator returns int32.
    group_list = torch_npu.npu_moe_compute_expert_tokens(sorted_experts, w13.shape[0]).to(torch.int64)
    gate_up = _grouped_matmul(rows, w13, group_list)
    if activation_name == "silu":
        hidden = torch_npu.npu_swiglu(gate_up, dim=-1)
    else:
        hidden = getattr(ops, GATED_ACTIVATIONS[activation_name])(gate_up)
    down = _grouped_matmul(hidden, w2, group_list)
    return torch_npu.npu_moe_finalize_routing(
        down, None, None, None, weights.to(down.dtype), expanded_row_idx, expert_idx
    )
