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

The front (`ConcatInput`, `run_concat`, in the tokenizer manager's process) tokenizes P and
P + B_i exactly as the branches' own requests were tokenized (the text of the prefix followed by
the branch's text), first prefills any branch token the cache lacks (typically the last token a
branch sampled: a finished request never computes its KV) with a `max_new_tokens=0` request, and
then asks the scheduler.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from sglang.runtime.control import ConcatAndAppend, ConcatResult
from sglang.runtime.generate_input import GenerateInput, InvalidRequestError

if TYPE_CHECKING:
    from sglang.runtime.radix_cache import TreeNode
    from sglang.runtime.scheduler.scheduler import Scheduler
    from sglang.runtime.tokenizer_manager import TokenizerManager


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


# -- the front: request, tokenization, prefill of missing tokens -----------------------------


@dataclass(frozen=True)
class ConcatInput:
    """A `/concat_and_append` request: `prefix` and `branches` are all text (each branch the text
    the fork appended after the prefix) or all token ids (each branch the ids after the prefix).
    `prefill_missing` first computes branch tokens the cache lacks."""

    prefix: str | list[int]
    branches: list[str] | list[list[int]]
    prefill_missing: bool = True

    @classmethod
    def from_dict(cls, body: Any) -> ConcatInput:
        """Validates a request body; raises InvalidRequestError (HTTP 400)."""
        if not isinstance(body, dict):
            raise InvalidRequestError("the request body must be a JSON object")
        unknown = set(body) - {"prefix", "branches", "prefill_missing"}
        if unknown:
            raise InvalidRequestError(f"unknown field(s): {', '.join(sorted(unknown))}", sorted(unknown)[0])
        prefix, branches = body.get("prefix"), body.get("branches")
        prefill = body.get("prefill_missing", True)
        if isinstance(prefix, str):
            if not isinstance(branches, list) or not all(isinstance(b, str) for b in branches):
                raise InvalidRequestError("with a text prefix, branches must be a list of strings", "branches")
        elif _is_ids(prefix):
            if not isinstance(branches, list) or not all(_is_ids(b) for b in branches):
                raise InvalidRequestError("with input_ids as prefix, branches must be lists of token ids", "branches")
        else:
            raise InvalidRequestError("prefix must be a string or a list of token ids", "prefix")
        if not branches:
            raise InvalidRequestError("give at least one branch", "branches")
        if not isinstance(prefill, bool):
            raise InvalidRequestError("prefill_missing must be a boolean", "prefill_missing")
        return cls(prefix, branches, prefill)

    def tokenize(self, encode: Callable[[str], list[int]]) -> tuple[list[int], list[list[int]], str | None]:
        """(prefix ids, each branch's ids after them, None) or, when the tokens of prefix + branch
        do not start with the prefix's own (a token spans the boundary), a reason instead."""
        if not isinstance(self.prefix, str):
            return list(self.prefix), [list(b) for b in self.branches], None
        prefix = encode(self.prefix)
        branches = []
        for i, text in enumerate(self.branches):
            ids = encode(self.prefix + text)
            if ids[: len(prefix)] != prefix:
                return prefix, [], f"branch {i}: a token spans the boundary between the prefix and the branch"
            branches.append(ids[len(prefix) :])
        return prefix, branches, None


def _is_ids(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in value)


async def run_concat(manager: TokenizerManager, obj: ConcatInput) -> dict[str, Any]:
    """Serves one request: `{"ok", "input_ids", "cached_tokens", "copied_tokens", "reason",
    "prefix_tokens"}`, plus, for text, `text_match_tokens`: how many leading tokens of the
    tokenized `prefix + "".join(branches)` equal `input_ids` (what a later request sending that
    text reuses). Not ok is an answer, not an error: the caller appends the text instead."""
    prefix, branches, reason = obj.tokenize(manager.tokenizer.encode)
    sequence = prefix + [t for b in branches for t in b]
    extra: dict[str, Any] = {"prefix_tokens": len(prefix)}
    if isinstance(obj.prefix, str):
        text_ids = manager.tokenizer.encode(obj.prefix + "".join(obj.branches))
        extra["text_match_tokens"] = _common_prefix(text_ids, sequence)
    if reason is None and len(sequence) >= manager.info.context_length:
        reason = f"the concatenation has {len(sequence)} tokens; the context length is {manager.info.context_length}"
    if reason is not None:
        return {**ConcatResult(False, sequence, reason=reason).to_json(), **extra}
    warm = [prefix + b for b in branches if prefix + b]
    if obj.prefill_missing and warm:
        async for _ in manager.generate(GenerateInput(input_ids=warm, sampling_params={"max_new_tokens": 0})):
            pass
    result = await manager.control(ConcatAndAppend(tuple(prefix), tuple(tuple(b) for b in branches)))
    return {**result.to_json(), **extra}


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n
