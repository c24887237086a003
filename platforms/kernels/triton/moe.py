"""MoE experts as two grouped GEMMs over expert-aligned blocks, then the sum over top-k.

1. `align_to_experts` sorts the (token, expert) pairs by expert in blocks of `moe_block_m`.
2. GEMM 1, per block: `hidden[p] = act(x[t] @ w13[e, :I].T) * (x[t] @ w13[e, I:].T)` (gate and
   up tiles in one program, the activation fused), stored in the input dtype.
3. GEMM 2, per block: `partial[p] = weight[p] * (hidden[p] @ w2[e].T)` in float32.
Experts with biases (gpt-oss) add `w13_bias[e]` to both GEMM 1 products before the activation and
`w2_bias[e]` to GEMM 2's before the routing weight, as the reference does.
4. `out[t] = sum_j partial[t * top_k + j]`, rounded to the input dtype.
Shapes are static (padded capacity, early exit for empty blocks), so no host read is needed.
The GEMMs' dots take operands in the input dtype with float32 accumulation (`jit_math`).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from sglang.platforms.kernels.triton.jit_math import ACTIVATIONS, gated
from sglang.platforms.kernels.triton.moe_align import ExpertBlocks, align_to_experts
from sglang.platforms.kernels.triton.tuning import TritonTuning, resolve


@triton.jit
def _grouped_gemm_kernel(
    A,
    B,
    C,
    SortedPairs,
    BlockExpert,
    NumPadded,
    RoutingWeights,
    Bias,
    num_pairs,
    n_cols,
    depth,
    stride_am,
    stride_be,
    stride_bn,
    stride_cm,
    stride_bias,
    A_ROW_DIV: tl.constexpr,
    GATED: tl.constexpr,
    ACTIVATION: tl.constexpr,
    WEIGHTED: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    """Program (block, column tile): rows are the block's pairs `p`, read from `A[p // A_ROW_DIV]`;
    `C[p, n] = sum_k A[., k] * B[e, n, k]` for the block's expert `e` (GATED: `act(that) *` the
    same with `B[e, n + n_cols, k]`; WEIGHTED: times `RoutingWeights[p]`; HAS_BIAS: `Bias[e, n]`
    (and `Bias[e, n + n_cols]` for the up half) added to the products first). `B` is unit-strided
    along `k`; padding pairs (`p == num_pairs`) are neither read nor written."""
    block = tl.program_id(0)
    if block * BLOCK_M >= tl.load(NumPadded):
        return
    expert = tl.load(BlockExpert + block).to(tl.int64)
    pairs = tl.load(SortedPairs + block * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    valid = pairs < num_pairs
    a_rows = A + (pairs // A_ROW_DIV)[:, None] * stride_am
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols
    b_cols = B + expert * stride_be + cols[None, :] * stride_bn
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    acc_up = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, depth, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_mask = ks < depth
        a = tl.load(a_rows + ks[None, :], mask=valid[:, None] & k_mask[None, :], other=0.0)
        b_mask = k_mask[:, None] & col_mask[None, :]
        b = tl.load(b_cols + ks[:, None], mask=b_mask, other=0.0)
        acc += tl.dot(a, b, input_precision="ieee")
        if GATED:
            b_up = tl.load(b_cols + n_cols * stride_bn + ks[:, None], mask=b_mask, other=0.0)
            acc_up += tl.dot(a, b_up, input_precision="ieee")
    if HAS_BIAS:
        bias_cols = Bias + expert * stride_bias + cols
        acc += tl.load(bias_cols, mask=col_mask, other=0.0).to(tl.float32)[None, :]
        if GATED:
            acc_up += tl.load(bias_cols + n_cols, mask=col_mask, other=0.0).to(tl.float32)[None, :]
    if GATED:
        acc = gated(acc, acc_up, ACTIVATION)
    if WEIGHTED:
        acc *= tl.load(RoutingWeights + pairs, mask=valid, other=0.0).to(tl.float32)[:, None]
    tl.store(C + pairs[:, None] * stride_cm + cols[None, :], acc, mask=valid[:, None] & col_mask[None, :])


def _grouped_gemm(
    a: torch.Tensor,
    b: torch.Tensor,
    out: torch.Tensor,
    blocks: ExpertBlocks,
    routing_weights: torch.Tensor | None,
    a_row_div: int,
    activation: str | None,
    tuning: TritonTuning,
    bias: torch.Tensor | None = None,
) -> None:
    """`out[p] = a[p // a_row_div] @ b[e_p].T (+ bias[e_p])` per pair (gated when `activation` is
    given, then `b`'s rows and `bias`'s columns are `[gate | up]`), scaled by `routing_weights[p]`
    when given."""
    n_cols = b.shape[1] // 2 if activation else b.shape[1]
    grid = (blocks.sorted_pairs.numel() // blocks.block_m, triton.cdiv(n_cols, tuning.moe_block_n))
    _grouped_gemm_kernel[grid](
        a,
        b,
        out,
        blocks.sorted_pairs,
        blocks.block_expert,
        blocks.num_padded,
        routing_weights if routing_weights is not None else out,
        bias if bias is not None else out,  # a placeholder pointer the kernel never reads
        blocks.num_pairs,
        n_cols,
        b.shape[2],
        a.stride(0),
        b.stride(0),
        b.stride(1),
        out.stride(0),
        bias.stride(0) if bias is not None else 0,
        A_ROW_DIV=a_row_div,
        GATED=activation is not None,
        ACTIVATION=activation or "silu",
        WEIGHTED=routing_weights is not None,
        HAS_BIAS=bias is not None,
        BLOCK_M=blocks.block_m,
        BLOCK_N=tuning.moe_block_n,
        BLOCK_K=tuning.moe_block_k,
        **tuning.launch_options(),
    )


def moe_experts(
    x: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    weights: torch.Tensor,
    expert_ids: torch.Tensor,
    activation_name: str = "silu",
    w13_bias: torch.Tensor | None = None,
    w2_bias: torch.Tensor | None = None,
    *,
    tuning: TritonTuning | None = None,
) -> torch.Tensor:
    """`sum_k weights[t, k] * expert_{ids[t, k]}(x[t])` for `x` `[T, H]`, `w13` `[E, 2I, H]`,
    `w2` `[E, H, I]`, `weights`/`expert_ids` `[T, top_k]`, optional biases `w13_bias` `[E, 2I]`
    and `w2_bias` `[E, H]`; returns `[T, H]` in `x`'s dtype."""
    tuning = resolve(tuning)
    tokens, top_k = expert_ids.shape
    x, w13, w2 = x.contiguous(), w13.contiguous(), w2.contiguous()
    if not tokens:
        return torch.empty_like(x)
    blocks = align_to_experts(expert_ids, w13.shape[0], tuning.moe_block_m)
    hidden = torch.empty(tokens * top_k, w13.shape[1] // 2, dtype=x.dtype, device=x.device)
    bias13, bias2 = (None if b is None else b.contiguous() for b in (w13_bias, w2_bias))
    _grouped_gemm(x, w13, hidden, blocks, None, top_k, ACTIVATIONS[activation_name], tuning, bias13)
    partial = torch.empty(tokens * top_k, x.shape[1], dtype=torch.float32, device=x.device)
    routing = weights.float().flatten().contiguous()
    _grouped_gemm(hidden, w2, partial, blocks, routing, 1, None, tuning, bias2)
    return partial.view(tokens, top_k, -1).sum(dim=1).to(x.dtype)
