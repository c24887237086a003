"""Parallel encoding for the frontend's `join("concate_and_append")`: the KV of a trunk followed by
its forks' branches, assembled from the KV the branches already computed instead of recomputed.

A program forked a trunk whose tokens are P; branch i continued it with tokens B_i, so P + B_i
was computed by the branch's own requests and, finished requests being cached, sits in the
prefix cache. `concat_cached_branches` caches the sequence P + B_1 + ... + B_n:

- P + B_1 is already a path of the radix tree: its slots are shared, nothing is copied;
- each later B_i gets new slots: its values are copied, its keys moved by RoPE from positions
  `len(P) + j` to `len(P) + sum(len(B_k) for k < i) + j` (`ModelRunner.copy_kv`).

B_i's KV is thus what its own branch computed: B_i attended to P and itself, not to the branches
before it. That is parallel encoding, what "concate_and_append" asks for; a request that starts
with the sequence reuses all of it (its `cached_tokens` say so) and its own tokens attend to all
of it. A backend without this appends the branches' text, which is recomputed with full
attention instead.

Invariants (scheduler side):
- It runs between scheduler steps, in the scheduler's process, so no request changes meanwhile.
- Every branch's cached path and the sequence's own cached prefix are locked while new slots are
  allocated (which may evict) and copied; every lock is released before returning, ok or not.
- New slots end in the tree or are freed: after a cache flush the pool is whole again.
- What is already cached of the sequence is reused, never copied again: a second call with the
  same branches copies nothing, and KV a request computed for the same tokens at the same
  positions (with full attention) is kept.
- A refusal changes nothing and says why: page_size > 1, the prefix cache disabled, a KV layout
  the runner cannot copy, a branch not fully cached, the sequence too long, no room in the pool.

The request's front half (validation, tokenization, prefill of what the cache lacks) runs in the
tokenizer manager's process: `runtime/processes/kv_concat_request.py`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from sglang.runtime.processes.control import ConcatResult

if TYPE_CHECKING:
    from sglang.runtime.memory.radix_cache import TreeNode
    from sglang.runtime.scheduler.scheduler import Scheduler


def concat_cached_branches(
    scheduler: Scheduler, prefix_ids: Sequence[int], branch_ids: Sequence[Sequence[int]]
) -> ConcatResult:
    """Caches `prefix_ids + branch_ids[0] + ... + branch_ids[-1]` from the branches' cached KV
    (see the module docstring). `branch_ids[i]` are branch i's tokens after the prefix."""
    prefix = [int(t) for t in prefix_ids]
    branches = [[int(t) for t in b] for b in branch_ids]
    sequence = prefix + [t for b in branches for t in b]
    reason = _refusal(scheduler, branches, sequence)
    if reason is not None:
        return ConcatResult(False, sequence, reason=reason)
    cache = scheduler.cache
    locked: list[TreeNode] = []

    def lock(node: TreeNode) -> None:
        cache.inc_lock_ref(node)
        locked.append(node)

    try:
        sources: list[torch.Tensor] = []  # per branch: the slots of its tokens after the prefix
        for i, branch in enumerate(branches):
            match = cache.match_prefix(prefix + branch)
            lock(match.last_node)
            if match.num_cached < len(prefix) + len(branch):
                reason = (
                    f"branch {i} is not fully cached: {match.num_cached} of its "
                    f"{len(prefix) + len(branch)} tokens (prefix included) are"
                )
                return ConcatResult(False, sequence, reason=reason)
            sources.append(match.slots[len(prefix) :])
        target = cache.match_prefix(sequence)
        lock(target.last_node)
        done = target.num_cached  # at least len(prefix + B_1): that path is cached
        assert done >= len(prefix), "the prefix is cached: every branch's path starts with it"
        missing = len(sequence) - done
        if missing == 0:
            return ConcatResult(True, sequence, cached_tokens=len(sequence))
        new = _allocate(scheduler, missing)
        if new is None:
            reason = f"the KV pool has no room for the {missing} tokens to copy"
            return ConcatResult(False, sequence, cached_tokens=done, reason=reason)
        try:
            _copy(scheduler, len(prefix), branches, sources, done, new)
        except BaseException:
            scheduler.free_slots(new)
            raise
        slots = torch.cat([target.slots, new])
        present = cache.insert(sequence, slots)
        scheduler.free_slots(slots[done:present])  # empty: nothing was cached since the match
        return ConcatResult(True, sequence, cached_tokens=len(sequence), copied_tokens=missing)
    finally:
        for node in locked:
            cache.dec_lock_ref(node)


def _copy(
    scheduler: Scheduler,
    prefix_len: int,
    branches: list[list[int]],
    sources: list[torch.Tensor],
    done: int,
    new: torch.Tensor,
) -> None:
    """Writes the KV of `sequence[done:]` at `new`: each branch's tokens past `done`, moved from
    their branch positions to their sequence positions."""
    start = prefix_len  # position of the branch's first token in the sequence
    for branch, source in zip(branches, sources):
        first = max(start, done) - start  # the branch's first token not cached yet
        if first < len(branch):
            dst = new[start + first - done : start + len(branch) - done]
            positions = torch.arange(prefix_len + first, prefix_len + len(branch))
            scheduler.runner.copy_kv(source[first:], dst, positions, start - prefix_len)
        start += len(branch)


def _refusal(scheduler: Scheduler, branches: list[list[int]], sequence: list[int]) -> str | None:
    page_size = scheduler.allocator.page_size
    if page_size != 1:
        return (
            f"needs page_size 1 (this server runs page_size {page_size}): branch boundaries fall "
            "inside pages, whose slots cannot be shared or moved alone"
        )
    if scheduler.cache.disable:
        return "the prefix cache is disabled (--disable-radix-cache)"
    if not branches:
        return "no branches"
    if (reason := scheduler.runner.kv_copy_unsupported()) is not None:
        return reason
    limit = min(scheduler.context_length, scheduler.runner.model.cos_sin.shape[0])
    if len(sequence) >= limit:
        return f"the concatenation has {len(sequence)} tokens; the context length is {limit}"
    return None


def _allocate(scheduler: Scheduler, count: int) -> torch.Tensor | None:
    """`count` fresh slots (page_size 1), evicting unlocked cache entries if the free pages fall short."""
    allocator = scheduler.allocator
    short = count - allocator.available_tokens()
    if short > 0:
        scheduler.cache.evict(short, scheduler.free_slots)
    return allocator.alloc_extend(None, count)
