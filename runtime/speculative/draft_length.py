"""Cost-aware adaptive draft length (`--speculative-adaptive`): how many tokens to draft for each
request's next verify step, from how often its drafts are accepted and what a drafted row costs.

Model. Each drafted token is accepted with probability `a` once the ones before it were (the
request's acceptance, estimated from its verify steps with older steps decayed), so `d` drafts
add `E(d) = 1 + a + ... + a^d` tokens in a step. The step costs `1 + c * d` plain decode steps,
`c` being a drafted row's cost relative to a decode step (`RowCost`, measured on the running
server's own single-request steps: close to 1 for quantized weights whose few-row kernels are
compute-bound, near 0 for dense weights whose matmuls are bound by reading them). The length is
the `d` in `[1, cap]` with the most tokens per decode-step cost, `E(d) / (1 + c * d)`, if that is
more than plain decoding's 1; otherwise the request decodes without drafts, and drafts one token
(a probe, to see whether its acceptance came back) after `FIRST_PROBE` such steps, then after
twice as many each time, up to `LAST_PROBE`; a probe that is accepted is followed by another at
once, so a request whose drafts start hitting again drafts within a few steps of its next probe. So where drafts
keep missing, speculation costs at most `c / LAST_PROBE` decode steps a step over plain decoding.
Where `c >= 1` no acceptance makes drafting pay: probes come every `LAST_PROBE` steps, to keep
`c` measured, so there too speculation costs at most `c / LAST_PROBE` a step.

Two kinds of draft, each with its own `a`: those that continue a long match (NGRAM's proposal
after at least `LONG_MATCH` tokens of context matched: the answer is copying its context, and a
copy tends to go on) and the rest (a one- to three-token match, or a draft model's proposal).
One estimate for both drafts short for either in an answer that copies in runs.

Measuring `c`. The first step of each row count is not timed: it captures or compiles that
shape (seconds, against milliseconds for a replay). A request that drafts every step takes no
plain step to compare its verify steps with, and the machine's load moves under a stale one, so
after `REFRESH_AFTER` timed verify steps the next request asked decodes one step plainly to time
it. The decode time is the median of the latest `TIMINGS` plain steps' and `c` the median of the
latest `TIMINGS` verify steps' samples, the prior counting as `PRIOR_SAMPLES` of them until enough
real ones push it out: on a shared machine one step's time varies tenfold (24-380 ms for the same
decode step at load 6), and a mean chases it.

Invariants: every limit lies in `[0, cap]`; `limit` is asked once per decode step of a request;
a request's state is dropped when it finishes; `RowCost.per_row` lies in `[0, OUTLIER]`.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

PRIOR_ACCEPTED, PRIOR_TRIALS = 1.0, 2.0
"""A new request's acceptance is 1/2, worth two drafted tokens of evidence."""
LONG_MATCH = 4
"""Context tokens a draft's source must match for the draft to count as continuing a copy."""
PRIOR_LONG_ACCEPTED, PRIOR_LONG_TRIALS = 4.0, 5.0
"""A new request's acceptance of drafts that continue a long match: 4/5, worth five drafted
tokens (a copy tends to go on; the figures behind it are in benchmarks/README.md)."""
DECAY = 0.8
"""Each verify step scales the evidence before it by this: acceptance follows the text's runs."""
FIRST_PROBE, LAST_PROBE = 4, 32
"""Plain decode steps before a probe, first and at most."""
PRIOR_ROW_COST = 0.5
"""`c` before the server has timed steps of one request (see `PRIOR_SAMPLES`)."""
TIMINGS = 9
"""Timings (and `c` samples) `RowCost`'s medians are taken over, the latest ones."""
PRIOR_SAMPLES = 3
"""`PRIOR_ROW_COST` counts as this many samples of `c`, until pushed out."""
OUTLIER = 3.0
"""A `c` sample counts for at most this many decode steps."""
REFRESH_AFTER = 16
"""Timed verify steps after which a plain decode step is timed again."""


def expected_tokens(accept: float, drafts: int) -> float:
    """Tokens a verify step of `drafts` adds: the accepted run plus the target's own token."""
    return sum(accept**i for i in range(drafts + 1))


def best_length(accept: float, row_cost: float, cap: int) -> int:
    """The draft length in `[1, cap]` with the most tokens per unit of cost, or 0 where none
    beats plain decoding (one token for one decode step)."""
    gain = {d: expected_tokens(accept, d) / (1 + row_cost * d) for d in range(1, cap + 1)}
    best = max(gain, key=lambda d: (gain[d], -d))
    return best if gain[best] > 1.0 else 0


@dataclass
class RowCost:
    """`c`: the extra time of a drafted row over a plain decode step, from timed steps of one
    request (`rows` = 1 plain decode, more: a verify step of `rows - 1` drafts)."""

    decode_timings: deque[float] = field(default_factory=lambda: deque(maxlen=TIMINGS))
    samples: deque[float] = field(default_factory=lambda: deque([PRIOR_ROW_COST] * PRIOR_SAMPLES, maxlen=TIMINGS))
    timed_shapes: set[int] = field(default_factory=set)
    verifies_since_decode: int = 0
    """Timed verify steps since the last timed plain decode step."""

    @property
    def decode_s(self) -> float | None:
        return statistics.median(self.decode_timings) if self.decode_timings else None

    @property
    def per_row(self) -> float:
        return statistics.median(self.samples)

    def observe(self, rows: int, seconds: float) -> None:
        if rows not in self.timed_shapes:  # this step captured or compiled its shape
            self.timed_shapes.add(rows)
            return
        if rows == 1:
            self.decode_timings.append(seconds)
            self.verifies_since_decode = 0
            return
        self.verifies_since_decode += 1
        if (decode_s := self.decode_s) is not None:
            self.samples.append(min(max((seconds / decode_s - 1) / (rows - 1), 0.0), OUTLIER))

    def take_refresh(self) -> bool:
        """Whether the next step should decode plainly to time a decode step again. Asking
        consumes it: a step that turns out batched is not timed, and is asked for again
        `REFRESH_AFTER` timed verify steps later."""
        if self.verifies_since_decode < REFRESH_AFTER:
            return False
        self.verifies_since_decode = 0
        return True


@dataclass
class Evidence:
    """Drafted tokens accepted out of those tried, older verify steps decayed."""

    accepted: float
    trials: float

    @property
    def acceptance(self) -> float:
        return self.accepted / self.trials

    def add(self, drafted: int, accepted: int) -> None:
        """A verify step's drafts: each accepted one a success, the first rejected one a failure."""
        self.accepted = DECAY * self.accepted + accepted
        self.trials = DECAY * self.trials + min(accepted + 1, drafted)


@dataclass
class RequestDrafting:
    """One request's evidence for each kind of draft, the kind of its pending draft, and its
    probing while drafting does not pay."""

    short: Evidence = field(default_factory=lambda: Evidence(PRIOR_ACCEPTED, PRIOR_TRIALS))
    long: Evidence = field(default_factory=lambda: Evidence(PRIOR_LONG_ACCEPTED, PRIOR_LONG_TRIALS))
    pending_long: bool = False
    """Whether the draft of the step asked for last continues a long match."""
    plain_steps: int = 0
    probe_after: int = FIRST_PROBE

    @property
    def pending(self) -> Evidence:
        return self.long if self.pending_long else self.short


@dataclass
class AdaptiveDraftLength:
    cap: int
    cost: RowCost = field(default_factory=RowCost)
    requests: dict[str, RequestDrafting] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.cap < 1:
            raise ValueError(f"the draft cap must be at least 1, got {self.cap}")

    def limit(self, rid: str, matched: int = 0) -> int:
        """Drafts the request `rid` may check in this decode step (0: decode it plainly);
        `matched`: context tokens its draft continues, where known before the length is (NGRAM)."""
        state = self.requests.setdefault(rid, RequestDrafting())
        state.pending_long = matched >= LONG_MATCH
        if self.cost.take_refresh():
            return 0
        length = best_length(state.pending.acceptance, self.cost.per_row, self.cap)
        if length:
            state.plain_steps, state.probe_after = 0, FIRST_PROBE
            return length
        state.plain_steps += 1
        # Where no acceptance would pay (`c` >= 1), probes only keep `c` measured: the fewest.
        pays_at_best = best_length(1.0, self.cost.per_row, self.cap) > 0
        if state.plain_steps < (state.probe_after if pays_at_best else LAST_PROBE):
            return 0
        state.plain_steps, state.probe_after = 0, min(2 * state.probe_after, LAST_PROBE)
        return 1

    def observe(self, rid: str, drafted: int, accepted: int) -> None:
        """`rid`'s verify step checked `drafted` drafts (of the kind `limit` was last told) and
        accepted the first `accepted`."""
        if drafted < 1:
            return
        state = self.requests.setdefault(rid, RequestDrafting())
        state.pending.add(drafted, accepted)
        if accepted:  # a probe that hits: probe again next step (if drafting does not pay yet)
            state.plain_steps, state.probe_after = 0, 1

    def observe_step(self, rows: int, seconds: float) -> None:
        """A step of one request that fed `rows` tokens (its last one and its drafts) took `seconds`."""
        self.cost.observe(rows, seconds)

    def release(self, rid: str) -> None:
        self.requests.pop(rid, None)
