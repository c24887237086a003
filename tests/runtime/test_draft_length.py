"""The cost-aware adaptive draft length policy (`--speculative-adaptive`), simulated: a request
whose drafts are accepted at a given rate, on weights whose drafted rows cost a given fraction of
a decode step. Speculation must pay where drafts are accepted and cost at most a few percent
over plain decoding where none are."""

from __future__ import annotations

import itertools
import random
import time
from collections import deque
from collections.abc import Callable

import pytest
import torch

from sglang.runtime.scheduler.batch import make_entry
from sglang.runtime.scheduler.req import Req
from sglang.runtime.speculative import verify_step
from sglang.runtime.speculative.config import STANDALONE, SpeculativeConfig
from sglang.runtime.speculative.draft_length import (
    LAST_PROBE,
    LONG_MATCH,
    REFRESH_AFTER,
    TIMINGS,
    AdaptiveDraftLength,
    RowCost,
    best_length,
    expected_tokens,
)
from sglang.runtime.speculative.speculator import Draft, Speculator

from .runtime_harness import make_request

Acceptor = Callable[[int, int], int]
"""(step, drafts) -> how many of them the verify step accepts."""


def simulate(policy: AdaptiveDraftLength, accept: Acceptor, steps: int, row_cost: float) -> tuple[float, float]:
    """Tokens and cost (in plain decode steps) of `steps` decode steps of one request."""
    tokens = cost = 0.0
    for step in range(steps):
        drafts = policy.limit("r")
        assert 0 <= drafts <= policy.cap
        accepted = accept(step, drafts) if drafts else 0
        if drafts:
            policy.observe("r", drafts, accepted)
        tokens += accepted + 1
        cost += 1 + row_cost * drafts
    return tokens, cost


def policy_at(row_cost: float, cap: int = 11) -> AdaptiveDraftLength:
    return AdaptiveDraftLength(cap, RowCost(samples=deque([row_cost] * TIMINGS, maxlen=TIMINGS)))


def test_expected_tokens_and_the_best_length() -> None:
    assert expected_tokens(0.5, 0) == 1 and expected_tokens(0.5, 2) == 1.75
    assert best_length(0.95, 0.05, cap=11) == 11, "cheap rows, drafts accepted: the whole cap"
    assert 1 < best_length(0.9, 0.5, cap=11) < 11, "rows at half a decode step: a shorter run"
    assert best_length(0.3, 0.5, cap=11) == 0 and best_length(0.0, 0.0, cap=11) == 0


@pytest.mark.parametrize("row_cost", [0.1, 0.5, 1.0])
def test_drafts_that_always_miss_cost_at_most_a_few_percent(row_cost: float) -> None:
    policy = policy_at(row_cost)
    tokens, cost = simulate(policy, lambda step, drafts: 0, steps=600, row_cost=row_cost)
    assert tokens == 600
    assert cost <= 600 * (1 + 1.5 * row_cost / LAST_PROBE) + 5, cost
    assert policy.limit("r") <= 1


@pytest.mark.parametrize("row_cost", [0.05, 0.5, 1.0])
def test_drafts_that_hit_pay_by_their_row_cost(row_cost: float) -> None:
    """Each draft accepted with probability 0.9 (seeded): tokens per unit of cost within 15% of
    the best fixed length's in expectation (or of plain decoding, where no length pays)."""
    draws = random.Random(0)
    hits = lambda step, drafts: next((i for i in range(drafts) if draws.random() >= 0.9), drafts)
    tokens, cost = simulate(policy_at(row_cost), hits, steps=400, row_cost=row_cost)
    best = max([1.0] + [sum(0.9**i for i in range(d + 1)) / (1 + row_cost * d) for d in range(1, 12)])
    assert tokens / cost >= 0.85 * best, (tokens / cost, best)


def test_acceptance_that_comes_back_is_found_by_a_probe() -> None:
    policy = policy_at(0.3)
    simulate(policy, lambda step, drafts: 0, steps=200, row_cost=0.3)
    assert policy.limit("r") == 0
    steps, drafts = 0, 0
    while drafts <= 2 and steps < 2 * LAST_PROBE:
        steps += 1
        drafts = policy.limit("r")
        if drafts:
            policy.observe("r", drafts, drafts)
    assert drafts > 2 and steps <= LAST_PROBE + 6, (drafts, steps)


def test_drafts_that_continue_a_long_match_are_judged_apart() -> None:
    """A request that copies in runs: drafts continuing a long match are accepted whole, the
    others (one-token matches between the runs) miss. Told apart, the copies draft the cap while
    the misses stop drafting; one estimate for both would draft short for either."""

    def run(tell: bool) -> tuple[float, AdaptiveDraftLength]:
        policy, tokens, cost = policy_at(0.3), 0.0, 0.0
        for step in range(300):
            copying = step % 3 == 0
            drafts = policy.limit("r", LONG_MATCH if tell and copying else 1)
            accepted = drafts if copying else 0
            if drafts:
                policy.observe("r", drafts, accepted)
            tokens += accepted + 1
            cost += 1 + 0.3 * drafts
        return tokens / cost, policy

    told, policy = run(tell=True)
    untold, _ = run(tell=False)
    assert policy.limit("r", LONG_MATCH) == policy.cap and policy.limit("r", 1) == 0
    assert told > 1.3 * untold and told > 1.5, (told, untold)


def test_free_drafts_are_cut_to_the_length_their_match_earns() -> None:
    """NGRAM-like drafts (free) are proposed at the whole budget, then cut to the adaptive length
    of their kind: a long match earns more drafts than a one-token match."""
    config = SpeculativeConfig(STANDALONE, 5, 8, "draft", 1, 1, 1, 1, adaptive=True)

    class Copier:
        free = True
        matched = 1

        def draft(self, reqs: list[Req], max_tokens: list[int]) -> list[Draft]:
            return [Draft([7] * count, self.matched) for count in max_tokens]

        def release(self, req: Req) -> None:
            pass

    drafter = Copier()
    speculator = Speculator(config, drafter)
    speculator.lengths = policy_at(0.3, cap=config.max_drafts)
    req = Req(make_request([1, 2, 3], max_new_tokens=64), frozenset(), 100, 512)
    req.output_ids.append(5)
    short = len(speculator.draft([req])[0])
    drafter.matched = LONG_MATCH
    long = len(speculator.draft([req])[0])
    assert short <= 1 and long >= 3, (short, long)


def test_row_cost_is_measured_from_single_request_steps() -> None:
    cost = RowCost()
    cost.observe(4, 2.0)  # the first step of a shape captures it: not timed
    cost.observe(4, 0.09)  # no decode step timed yet: nothing to compare with
    assert cost.per_row == 0.5
    cost.observe(1, 3.0)  # a capture
    cost.observe(1, 0.02)
    assert cost.decode_s == 0.02
    cost.observe(5, 1.5 * 0.02)  # one sample does not outvote the prior
    assert cost.per_row == 0.5
    for seconds in (0.5, 0.02, 0.021, 0.019):  # one load spike among them: the median holds
        cost.observe(1, seconds)
    assert cost.decode_s == 0.02
    cost.observe(5, 2.0)  # a load spike
    for _ in range(TIMINGS):
        cost.observe(5, 1.5 * 0.02)  # four drafted rows at an eighth of a decode step each
    assert cost.per_row == pytest.approx(0.125)


def test_a_finished_request_is_forgotten() -> None:
    policy = policy_at(0.1)
    simulate(policy, lambda step, drafts: drafts, steps=20, row_cost=0.1)
    assert policy.limit("r") == 11
    policy.release("r")
    assert "r" not in policy.requests
    with pytest.raises(ValueError):
        AdaptiveDraftLength(0)


def test_a_drafted_row_as_dear_as_a_decode_step_turns_drafting_off() -> None:
    """Timings as a real run feeds them: the first step of every shape captures it (seconds), the
    warm-up's few plain steps come first, then a request whose drafts are accepted 60% of the
    time on weights where each drafted row costs a whole decode step (c = 1: no length pays).
    Before captures were left out, the warm-up's capture made decode steps look 40x dearer than
    they are, verify steps free, and the request drafted the whole cap at twice the cost."""
    decode_s, capture_s = 0.012, 2.5
    captured: set[int] = set()

    def step_seconds(rows: int) -> float:
        first = rows not in captured
        captured.add(rows)
        return capture_s if first else decode_s * rows

    policy = AdaptiveDraftLength(11)
    for _ in range(7):  # the warm-up request
        policy.observe_step(1, step_seconds(1))
    draws = random.Random(0)
    tokens = cost = 0.0
    for step in range(400):
        drafts = policy.limit("r")
        accepted = next((i for i in range(drafts) if draws.random() >= 0.6), drafts)
        policy.observe("r", drafts, accepted)
        policy.observe_step(drafts + 1, step_seconds(drafts + 1))
        if step >= 100:
            tokens += accepted + 1
            cost += 1 + drafts
    assert policy.cost.per_row == pytest.approx(1.0, abs=0.05)
    assert tokens / cost >= 1 - 1.5 / LAST_PROBE, tokens / cost


def test_row_cost_is_timed_again_while_every_step_drafts() -> None:
    """A request that drafts every step still decodes one step plainly every `REFRESH_AFTER`
    timed verify steps, so `c` follows the load rather than a decode step timed long ago."""
    policy = policy_at(0.1, cap=4)
    for _ in range(2):  # a capture, then a timed decode step
        policy.observe_step(1, 0.01)
    limits = []
    for _ in range(4 * (REFRESH_AFTER + 1)):
        limits.append(policy.limit("r"))
        policy.observe("r", limits[-1], limits[-1])
        policy.observe_step(limits[-1] + 1, 0.02 if limits[-1] == 0 else 0.02 + 0.001 * limits[-1])
    plain = [i for i, limit in enumerate(limits) if limit == 0]
    assert len(plain) >= 3 and {b - a for a, b in itertools.pairwise(plain)} == {REFRESH_AFTER + 1}, plain
    assert policy.cost.decode_s > 0.015, "the slower decode steps were timed"


def test_drafting_time_counts_in_a_drafted_rows_cost() -> None:
    """A draft model runs its own passes before the target's step: a drafted row costs those
    too, so a drafter as slow as the target's decode step makes drafting pay nothing."""
    config = SpeculativeConfig(STANDALONE, 5, 4, "draft", 1, 1, 1, 1, adaptive=True)
    decode_s = 0.004

    class DraftModelAsSlowAsTheTarget:
        free = False

        def draft(self, reqs: list[Req], max_tokens: list[int]) -> list[Draft]:
            time.sleep(decode_s * max_tokens[0])
            return [Draft([7] * max_tokens[0])]

        def release(self, req: Req) -> None:
            pass

    speculator = Speculator(config, DraftModelAsSlowAsTheTarget())
    speculator.lengths = policy_at(0.05, cap=config.max_drafts)  # measured cheap so far: drafts
    req = Req(make_request([1, 2, 3], max_new_tokens=64), frozenset(), 100, 512)
    req.output_ids.append(5)
    req.slots = torch.arange(len(req.fill_ids) - 1)  # decoding: every token but the last is cached
    for _ in range(2):  # each shape's first step is a capture, then a timed one
        speculator.last_draft_s = 0.0
        verify_step.time_step(speculator, [make_entry(req, 1)], decode_s)
    for _ in range(2):
        entry = make_entry(req, 1)
        entry.with_draft(speculator.draft([req])[0])
        assert entry.draft
        verify_step.time_step(speculator, [entry], decode_s)
    assert speculator.lengths.cost.samples[-1] >= 0.9, list(speculator.lengths.cost.samples)
