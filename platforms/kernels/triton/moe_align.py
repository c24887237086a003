"""Aligning (token, expert) pairs to experts by block, for the grouped GEMM.

Pair `p = t * top_k + j` is token `t`'s `j`-th routed expert. The pairs are sorted by expert
(stably) and each expert's run is padded to a multiple of `block_m`, so every block of
`block_m` consecutive entries belongs to one expert. Everything is tensor work of static size
(an upper bound on the padded length), with no host read: the alignment can be captured in a
CUDA graph or traced, like the kernels that consume it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ExpertBlocks:
    sorted_pairs: torch.Tensor
    """`[capacity]` int32: pair indices grouped by expert; padding entries hold `num_pairs`."""
    block_expert: torch.Tensor
    """`[capacity / block_m]` int32: the expert of each block (blocks past the end: the last expert)."""
    num_padded: torch.Tensor
    """`[1]` int32: entries in use (a multiple of `block_m`); blocks from there on are empty."""
    num_pairs: int
    block_m: int


def align_to_experts(expert_ids: torch.Tensor, num_experts: int, block_m: int) -> ExpertBlocks:
    """Groups the pairs of `expert_ids` `[T, top_k]` by expert in blocks of `block_m`."""
    flat = expert_ids.flatten().long()
    num_pairs = flat.numel()
    device = flat.device
    # Each expert pads by at most block_m - 1 entries.
    capacity = -(-(num_pairs + num_experts * (block_m - 1)) // block_m) * block_m
    counts = torch.zeros(num_experts, dtype=torch.long, device=device)
    counts.scatter_add_(0, flat, torch.ones_like(flat))
    padded = (counts + block_m - 1) // block_m * block_m
    padded_ends = padded.cumsum(0)
    order = flat.argsort(stable=True)
    sorted_experts = flat[order]
    rank = torch.arange(num_pairs, device=device) - (counts.cumsum(0) - counts)[sorted_experts]
    destination = (padded_ends - padded)[sorted_experts] + rank
    sorted_pairs = torch.full((capacity,), num_pairs, dtype=torch.int32, device=device)
    sorted_pairs.scatter_(0, destination, order.to(torch.int32))
    block_starts = torch.arange(0, capacity, block_m, device=device)
    block_expert = torch.searchsorted(padded_ends, block_starts, right=True).clamp_(max=num_experts - 1)
    return ExpertBlocks(
        sorted_pairs=sorted_pairs,
        block_expert=block_expert.to(torch.int32),
        num_padded=padded_ends[-1:].to(torch.int32),
        num_pairs=num_pairs,
        block_m=block_m,
    )
