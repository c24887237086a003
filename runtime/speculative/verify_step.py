"""The scheduler's side of a verify step: drafts attached to decode entries before the step, the
verify rows judged after it, and the counts upstream reports (`spec_verify_ct` and the accepted
drafts behind `spec_accept_length` / `spec_accept_rate`)."""

from __future__ import annotations

import torch

from sglang.runtime.scheduler.batch import BatchEntry, RowMap
from sglang.runtime.scheduler.req import Req
from sglang.runtime.speculative.acceptance import Verified, verify
from sglang.runtime.speculative.speculator import Speculator

TOTALS = ("spec_verify_ct", "spec_draft_tokens", "spec_accepted_tokens")
"""The scheduler's running totals (and each request's own): decode steps taken with speculation
on (with or without drafts, as upstream counts every decode step a verify), drafted tokens
verified, drafted tokens accepted."""


def attach_drafts(speculator: Speculator | None, entries: list[BatchEntry], mixed: bool) -> list[BatchEntry]:
    """`entries` with drafts attached to their decode entries, plain decodes first, then verify
    entries, then the rest (decodes first is what attention backends pack fastest). A platform
    that cannot mix decode rows and extends in a step (`mixed`) gets drafts for all of its decode
    rows or for none. A constrained request's draft is cut at the first token its grammar
    rejects (a token the grammar rejects ends the accepted run anyway) and carries the grammar's
    bitmask for each of its rows."""
    if speculator is None:
        return entries
    decodes = [e for e in entries if e.samples and e.extend == 1 and e.req.output_ids]
    verifying = []
    for e, draft in zip(decodes, speculator.draft([e.req for e in decodes]) if decodes else []):
        bitmasks = None
        if draft and e.req.grammar is not None:
            draft, bitmasks = e.req.grammar.walk_draft(draft)
        if draft:
            e.with_draft(draft, bitmasks)
            verifying.append(e)
    if not verifying:
        return entries
    if not mixed and len(verifying) < len(entries):
        drop_drafts(verifying)
        return entries
    return [e for e in entries if e.extend == 1] + verifying + [e for e in entries if e.extend > 1 and not e.draft]


def drop_drafts(entries: list[BatchEntry]) -> bool:
    """Turns verify entries back into decode entries; whether there was any."""
    dropped = False
    for e in entries:
        if e.draft:
            e.with_draft([])
            dropped = True
    return dropped


def verify_entries(entries: list[BatchEntry], row_map: RowMap, logits: torch.Tensor) -> dict[int, Verified]:
    """Each verify entry's tokens, by the entry's index; changes no request's state."""
    verified = {}
    for i, (e, (_, row)) in enumerate(zip(entries, row_map)):
        if e.draft and row is not None:
            verified[i] = verify(e.req, e.draft, logits[row : row + len(e.draft) + 1], e.draft_bitmasks)
    return verified


def time_step(speculator: Speculator | None, entries: list[BatchEntry], seconds: float) -> None:
    """A step of one decoding request (plain decode or verify) took `seconds` in the target's
    forward, after drafting for it took `speculator.last_draft_s`: together, what adaptive draft
    lengths measure a drafted row's cost from (a draft model's passes are part of what a drafted
    row costs; batched steps mix costs, so they are not timed)."""
    if speculator is None or speculator.lengths is None or len(entries) != 1:
        return
    e = entries[0]
    if e.samples and e.req.output_ids and e.extend == len(e.draft) + 1:
        speculator.lengths.observe_step(e.extend, seconds + speculator.last_draft_s)


def count(totals: dict[str, int], req: Req, drafted: int, accepted: int) -> None:
    """One decode step of `req` with speculation on: `drafted` tokens verified, `accepted` kept."""
    for key, value in zip(TOTALS, (1, drafted, accepted)):
        totals[key] += value
        setattr(req, key, getattr(req, key) + value)
