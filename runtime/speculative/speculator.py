"""Speculative decoding as a scheduler mode: drafts attached to decode entries, verified by the
target in the same step, and the counts upstream reports.

A decode entry with drafts becomes a verify entry: it feeds the request's last token and the
drafts as one extend over the request's KV (through the same `StepInputs`, step runner and
attention extend path as a prefill chunk), and asks for a logit row at each of them. The scheduler
then appends `acceptance.verify`'s tokens one by one (stopping at a finish) and frees the slots of
the drafts that were not kept.

Requests whose logit processing depends on the tokens before a row are decoded without drafts:
frequency/presence/repetition penalties and `min_new_tokens` not yet reached (end tokens are
suppressed until it is). Grammar constraints are drafted for: `verify_step.attach_drafts` cuts a
draft at its first token the grammar rejects and masks each row with the grammar's state after
the drafts before it; logit bias is the same for every row.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Protocol

from sglang.runtime.scheduler.req import Req
from sglang.runtime.speculative.config import NGRAM, SpeculativeConfig
from sglang.runtime.speculative.draft_length import AdaptiveDraftLength
from sglang.runtime.speculative.ngram import NgramCorpus, NgramIndex, NgramLimits

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Draft:
    tokens: list[int]
    matched: int = 0
    """Context tokens the source of `tokens` matched (NGRAM); 0 where that means nothing."""


class Drafter(Protocol):
    """Proposes tokens to verify. Invariant: drafting changes no request's state."""

    free: bool
    """Drafting costs nothing next to a step (an index lookup): adaptive lengths are chosen after
    drafting the whole budget, knowing what each draft continues. Otherwise (a draft model's
    passes) the length is chosen first and only that many are drafted."""

    def draft(self, reqs: list[Req], max_tokens: list[int]) -> list[Draft]:
        """Per request, at most its `max_tokens` drafts (possibly none)."""

    def release(self, req: Req) -> None:
        """`req` finished (or was aborted): drop what the drafter keeps for it."""

    def forget(self) -> None:
        """The cache was flushed (nothing runs): drop what finished requests left behind."""


class NgramDrafter:
    """Drafts from the request's own prompt and output, else from recent finished requests."""

    free = True

    def __init__(self, config: SpeculativeConfig) -> None:
        self.limits = NgramLimits(config.min_match_window, config.max_match_window, config.max_trie_depth)
        self.indexes: dict[str, NgramIndex] = {}
        self.corpus = NgramCorpus(config.capacity)

    def draft(self, reqs: list[Req], max_tokens: list[int]) -> list[Draft]:
        return [self._draft(req, count) for req, count in zip(reqs, max_tokens)]

    def _draft(self, req: Req, max_tokens: int) -> Draft:
        index = self.indexes.setdefault(req.rid, NgramIndex())
        fill = req.fill_ids
        index.extend(fill[len(index) :])
        tokens, matched = index.draft(fill, max_tokens, self.limits, exclude_tail=True)
        if not tokens:
            tokens, matched = self.corpus.index.draft(fill, max_tokens, self.limits, exclude_tail=False)
        return Draft(tokens, matched)

    def release(self, req: Req) -> None:
        index = self.indexes.pop(req.rid, None)
        if index is not None and req.output_ids:
            self.corpus.add(req.fill_ids)

    def forget(self) -> None:
        """Empties the corpus, as upstream's NGRAM worker does on `flush_cache`: a request sent
        again after a flush is drafted for from its own tokens, not from its earlier answer."""
        self.corpus.reset()


def drafts_allowed(req: Req) -> bool:
    """Whether `req` may be drafted for (see the module docstring for why not)."""
    p = req.params
    penalized = p.frequency_penalty or p.presence_penalty or p.repetition_penalty != 1.0
    return not penalized and len(req.output_ids) >= p.min_new_tokens


class Speculator:
    """The scheduler's speculative mode: one drafter and the running totals."""

    def __init__(self, config: SpeculativeConfig, drafter: Drafter) -> None:
        self.config = config
        self.drafter = drafter
        self.lengths = AdaptiveDraftLength(config.max_drafts) if config.adaptive else None
        self.last_draft_s = 0.0
        """How long the last `draft` call took: part of the step it drafted for (a draft model
        runs its own forward passes before the target's)."""
        logger.info("speculative decoding: %s", config.describe())
        if not config.adaptive:
            logger.info(
                "every verify step checks the whole draft budget: that pays where a drafted row costs little next "
                "to a decode step (a GPU); where it does not (a CPU's quantized kernels), --speculative-adaptive "
                "sizes each request's drafts by their acceptance and the measured cost of a row"
            )

    def draft(self, reqs: list[Req]) -> list[list[int]]:
        """The drafts for each request's next step: never more than its remaining output allows
        (a verify step appends the accepted drafts plus one token), nor than its adaptive length
        (asked once per request and step, after drafting where drafts are free)."""
        started = time.perf_counter()
        lengths, free = self.lengths, self.drafter.free
        budgets = [min(self.config.max_drafts, r.max_new_tokens - len(r.output_ids) - 1) for r in reqs]
        if lengths is not None and not free:
            budgets = [min(b, lengths.limit(r.rid)) for r, b in zip(reqs, budgets)]
        wanted = [i for i, (r, b) in enumerate(zip(reqs, budgets)) if b >= 1 and drafts_allowed(r)]
        proposed = [Draft([]) for _ in reqs]
        if wanted:
            for i, draft in zip(wanted, self.drafter.draft([reqs[i] for i in wanted], [budgets[i] for i in wanted])):
                proposed[i] = draft
        if lengths is not None and free:
            budgets = [min(b, lengths.limit(r.rid, d.matched)) for r, b, d in zip(reqs, budgets, proposed)]
        self.last_draft_s = time.perf_counter() - started
        return [d.tokens[:b] for d, b in zip(proposed, budgets)]

    def observe(self, req: Req, drafted: int, accepted: int) -> None:
        """`req`'s verify step checked `drafted` drafts and accepted the first `accepted`."""
        if self.lengths is not None:
            self.lengths.observe(req.rid, drafted, accepted)

    def release(self, req: Req) -> None:
        self.drafter.release(req)
        if self.lengths is not None:
            self.lengths.release(req.rid)

    def forget(self) -> None:
        self.drafter.forget()


def build_speculator(config: SpeculativeConfig | None, draft_model: Drafter | None = None) -> Speculator | None:
    """The mode `config` asks for (None without speculation). STANDALONE takes its drafter, the
    draft model the scheduler's process loaded (`draft_model.load_draft`)."""
    if config is None:
        return None
    if config.algorithm == NGRAM:
        return Speculator(config, NgramDrafter(config))
    if draft_model is None:
        raise ValueError(f"--speculative-algorithm {config.algorithm} needs its draft model loaded")
    return Speculator(config, draft_model)
