"""Packs the requests chosen for one step into the model runner's `StepInputs`.

Each entry computes `fill_ids[kv_len : kv_len + extend]` of its request. Logit rows are asked
for where they are used: the row that samples the next token (when the step reaches the end of
the request's known tokens) and the rows that score prompt tokens for input logprobs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from sglang.ops.attention import AttentionInputs
from sglang.ops.step import StepInputs
from sglang.runtime.memory.window_pool import WindowPool
from sglang.runtime.scheduler.req import Req


@dataclass
class BatchEntry:
    req: Req
    extend: int
    start: int
    """`kv_len` before the step: position of the entry's first token."""
    input_logprob_rows: list[int]
    """Positions `p` whose logits score prompt token `p + 1`."""
    samples: bool
    draft: list[int] = field(default_factory=list)
    """Speculative decoding: tokens drafted after the request's last one, fed after it in this
    step (counted in `extend`), each with its own logit row after the sample row."""
    draft_bitmasks: torch.Tensor | None = None
    """A constrained request's grammar bitmasks along `draft` (`GrammarMatcher.walk_draft`):
    one per logit row of the verify entry."""

    def token_ids(self) -> list[int]:
        """The tokens this step feeds: the request's own, then the drafts."""
        own = self.extend - len(self.draft)
        return [*self.req.fill_ids[self.start : self.start + own], *self.draft]

    def with_draft(self, draft: list[int], bitmasks: torch.Tensor | None = None) -> None:
        """Turns a decode entry into a verify entry of `draft` (or back, with [])."""
        self.extend += len(draft) - len(self.draft)
        self.draft, self.draft_bitmasks = draft, bitmasks if draft else None


def input_logprob_positions(req: Req, start: int, end: int) -> list[int]:
    """Positions in `[start, end)` whose logits give the logprob of a wanted prompt token.

    Prompt token `q` (for `q >= max(logprob_start_len, 1)`) is scored by the logits at `q - 1`.
    Positions already recorded (before a retraction) are not asked for again.
    """
    if not req.wants_input_logprobs():
        return []
    recorded = sum(lp is not None for lp, _ in req.log.input_token)
    first = max(req.logprobs.logprob_start_len, 1) - 1 + recorded
    last = len(req.input_ids) - 1
    return list(range(max(start, first), min(end, last)))


def make_entry(req: Req, extend: int) -> BatchEntry:
    start = req.kv_len
    end = start + extend
    samples = end == len(req.fill_ids) and req.max_new_tokens > 0
    return BatchEntry(req, extend, start, input_logprob_positions(req, start, end), samples)


def _lora_slots(entries: list[BatchEntry]) -> torch.Tensor:
    slots = torch.tensor([e.req.lora_slot or 0 for e in entries], dtype=torch.long)
    return slots.repeat_interleave(torch.tensor([e.extend for e in entries]))


RowMap = list[tuple[list[int], int | None]]
"""Per entry of a step: the indices of its input-logprob rows and of its sample row (or None)
into the logits the runner returns. A verify entry's draft rows follow its sample row."""


def build_step(
    entries: list[BatchEntry], with_lora: bool = False, window_pool: WindowPool | None = None
) -> tuple[StepInputs, RowMap]:
    """The packed inputs, and per entry (indices of its input-logprob rows, index of its sample
    row or None) into the logits the runner returns. `with_lora`: each entry's rows carry its
    request's LoRA slot (one segment per entry). `window_pool`: the step carries window slots."""
    ids, positions, logit_rows = [], [], []
    row_map: RowMap = []
    token_offset = 0
    for e in entries:
        ids.extend(e.token_ids())
        positions.extend(range(e.start, e.start + e.extend))
        lp_rows = []
        for p in e.input_logprob_rows:
            lp_rows.append(len(logit_rows))
            logit_rows.append(token_offset + p - e.start)
        sample_row = None
        if e.samples:
            sample_row = len(logit_rows)
            last = token_offset + e.extend - 1
            logit_rows.extend(range(last - len(e.draft), last + 1))
        row_map.append((lp_rows, sample_row))
        token_offset += e.extend
    kv_slots = torch.cat([e.req.slots for e in entries])
    attention = AttentionInputs(
        seq_lens=tuple(e.req.kv_len for e in entries),
        extend_lens=tuple(e.extend for e in entries),
        kv_slots=kv_slots,
        window_slots=window_pool.window_slots(kv_slots) if window_pool is not None else None,
    )
    step = StepInputs(
        input_ids=torch.tensor(ids, dtype=torch.long),
        positions=torch.tensor(positions, dtype=torch.long),
        attention=attention,
        logit_rows=torch.tensor(logit_rows, dtype=torch.long),
        lora_slots=_lora_slots(entries) if with_lora else None,
        draft_tokens=sum(len(e.draft) for e in entries),
    )
    return step, row_map
