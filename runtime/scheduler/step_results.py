"""What a step's logits do to its requests: tokens sampled or verified and appended (stop checks,
grammar, logprobs), finished requests ended, completed prefills shared with the prefix cache,
streamed updates queued.

Invariants: sampling changes no request's state, so a failure there fails the whole step (the
scheduler's `step` catches it); a failure while applying one request's share (its grammar, say)
ends that request alone. A verify entry keeps the KV of exactly the tokens it appended: the
slots of rejected drafts, and of drafts past a finish, are freed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import torch

from sglang.runtime.memory.hierarchical_cache import HierarchicalCache
from sglang.runtime.memory.radix_cache import RadixCache
from sglang.runtime.memory.window_pool import WindowPool
from sglang.runtime.requests.finish_reason import FinishReason
from sglang.runtime.scheduler import logprobs
from sglang.runtime.scheduler.batch import BatchEntry, RowMap
from sglang.runtime.scheduler.req import INTERNAL_ERROR_STATUS, Req
from sglang.runtime.scheduler.sampler import SampleResult, sample
from sglang.runtime.speculative import verify_step
from sglang.runtime.speculative.acceptance import Verified
from sglang.runtime.speculative.speculator import Speculator

logger = logging.getLogger(__name__)


def sample_step(entries: list[BatchEntry], row_map: RowMap, logits: torch.Tensor) -> SampleResult | None:
    """The step's sampled tokens (verify entries aside)."""
    rows = [(e.req, row) for e, (_, row) in zip(entries, row_map) if row is not None and not e.draft]
    if not rows:
        return None
    indices = [row for _, row in rows]
    if indices == list(range(logits.shape[0])):
        # Every row samples, in order (a plain decode step): no other reader of these logits,
        # so sampling takes them as they are rather than a gathered copy (32 rows: 6 MiB).
        # They are the runner's inference tensor: processing them in place needs the mode.
        with torch.inference_mode():
            return sample([req for req, _ in rows], logits)
    return sample([req for req, _ in rows], logits[indices])


class StepResults:
    """Applies steps' results for the scheduler. `end` takes a finished request out of the running
    batch and finishes it; `stream` queues a running request's update."""

    def __init__(
        self,
        stats: dict[str, int],
        speculator: Speculator | None,
        tail_text: Callable[[list[int]], str],
        cache: RadixCache,
        hicache: HierarchicalCache | None,
        window_pool: WindowPool | None,
        free_slots: Callable[[torch.Tensor], None],
        end: Callable[[Req], None],
        stream: Callable[[Req], None],
    ) -> None:
        self.stats = stats
        self.speculator = speculator
        self.tail_text = tail_text
        self.cache = cache
        self.hicache = hicache
        self.window_pool = window_pool
        self.free_slots = free_slots
        self.end = end
        self.stream = stream

    def apply(
        self,
        entries: list[BatchEntry],
        row_map: RowMap,
        logits: torch.Tensor,
        sampled: SampleResult | None,
        verified: dict[int, Verified],
    ) -> None:
        tokens = iter(range(len(sampled.token_ids))) if sampled is not None else iter(())
        for i, (e, (lp_rows, row)) in enumerate(zip(entries, row_map)):
            index = next(tokens) if row is not None and not e.draft else None
            try:
                if i in verified:
                    self._advance_verified(e, verified[i])
                else:
                    self._advance(e, lp_rows, logits, sampled, index)
            except Exception as exc:  # one request's own state (its grammar, say) failed: only it ends
                logger.exception("request %s failed after its step", e.req.rid)
                e.req.abort(f"internal error: {type(exc).__name__}: {exc}", status_code=INTERNAL_ERROR_STATUS)
                self.end(e.req)
        if self.window_pool is not None:  # tokens that left their request's window in this step
            for e in entries:
                self.window_pool.free_left_window(e.req.slots, e.req.num_cached, e.start)

    def append(self, req: Req, token: int, logprob_row: torch.Tensor | None) -> None:
        """Appends one output token and checks whether the request finished with it."""
        req.output_ids.append(token)
        if req.first_token_time is None:
            req.first_token_time = time.monotonic()
        self.stats["generation_tokens"] += 1
        if logprob_row is not None:
            logprobs.record_output(req, token, logprob_row)
        if req.grammar is not None:
            req.grammar.accept(token)
        req.check_finished(self.tail_text)

    def _advance(
        self, e: BatchEntry, lp_rows: list[int], logits: torch.Tensor, sampled: SampleResult | None, index: int | None
    ) -> None:
        """Applies one request's share of a step: input logprobs, its sampled token, finishing."""
        req = e.req
        if lp_rows:
            logprobs.record_input(req, e.input_logprob_rows, logits[lp_rows].log_softmax(-1))
        self.stats["prompt_tokens"] += e.extend if not req.output_ids else 0
        if sampled is not None and index is not None:
            logprob_row = None if sampled.logprobs is None else sampled.logprobs[index]
            self.append(req, sampled.token_ids[index], logprob_row)
            if self.speculator is not None and e.extend == 1 and len(req.output_ids) > 1:
                verify_step.count(self.stats, req, drafted=0, accepted=0)  # a decode step without drafts
        if not e.samples and req.kv_len == len(req.fill_ids) and req.max_new_tokens == 0:
            req.finish_reason = FinishReason.of_length(0)
        self._end_step(e)

    def _advance_verified(self, e: BatchEntry, verified: Verified) -> None:
        """Applies a verify entry: its tokens up to a finish, then the KV of what was kept.

        The step computed the KV of the last token and of every draft; the tokens kept are the
        last one and the accepted drafts that were appended, so the slots after them (rejected
        drafts, and drafts past a finish) are freed: `kv_len == len(fill_ids) - 1` again."""
        req = e.req
        appended = 0
        for appended, token in enumerate(verified.tokens, start=1):
            self.append(req, token, None if verified.logprobs is None else verified.logprobs[appended - 1])
            if req.finished:
                break
        keep = e.start + appended
        self.free_slots(req.slots[keep:])
        req.slots = req.slots[:keep]
        verify_step.count(self.stats, req, drafted=len(e.draft), accepted=min(appended, verified.accepted))
        if self.speculator is not None:
            self.speculator.observe(req, len(e.draft), verified.accepted)
        self._end_step(e)

    def _end_step(self, e: BatchEntry) -> None:
        """After a request's tokens of the step: finish it, or share its finished prefill, or
        stream its update."""
        req = e.req
        if req.finished:
            self.end(req)
            return
        if e.samples and not e.draft and (e.extend > 1 or len(req.output_ids) == 1):
            # Prefill is complete (its last chunk may be a single token): share its pages
            # with requests arriving meanwhile.
            computed = req.cache_ids(req.kv_len)
            self._cache_unfinished(req, computed)
            if self.hicache is not None:
                self.hicache.on_cached(computed)
        if req.stream and e.samples:
            self.stream(req)

    def _cache_unfinished(self, req: Req, computed: list[int]) -> None:
        """Shares `req`'s computed pages. Where the tree already held a page, the request reads
        the tree's slots from now on; with a window pool, a tree slot without a window slot takes
        over the request's own (the request's window may still reach it), then the request's
        duplicates are freed."""
        if self.window_pool is None:
            req.match, req.slots = self.cache.cache_unfinished(
                computed, req.slots, req.match, self.free_slots, req.priority
            )
            return
        duplicates: list[torch.Tensor] = []
        own = req.slots
        req.match, req.slots = self.cache.cache_unfinished(computed, own, req.match, duplicates.append, req.priority)
        self.window_pool.adopt(own, req.slots)
        for slots in duplicates:
            self.free_slots(slots)
