"""Speculative decoding (NGRAM) on tiny random-weight Llama and Qwen2 models, in-process.

Greedy outputs must be token-identical with and without speculation whatever the schedule
(batch sizes, shared prefixes in the radix cache, chunked prefill, pages of 4, a pool small
enough to retract), with fewer model steps than generated tokens, and the KV pool whole after.
Sampling must keep the target's distribution (chi-square tests at significance 0.001, fixed
seeds, so a run either always passes or always fails).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

from sglang.ops.sampling import filter_probs
from sglang.runtime.processes.messages import GenerateRequest
from sglang.runtime.scheduler.scheduler import Scheduler
from sglang.runtime.speculative.acceptance import rejection_sample

from .runtime_harness import Runtime, chat_prompt, make_request, model_threads
from .speculative_harness import (
    ARCHITECTURES,
    Result,
    make_scheduler,
    make_standalone_scheduler,
    prompts,
    request,
    run,
    tiny_model,
)

NGRAM = {"speculative_algorithm": "NGRAM"}
CHI_SQUARE_Z = 3.090
"""Standard normal quantile of significance 0.001 (one-sided): the tests' stated level."""
SAMPLES = 700
RARE = 10


def chi_square_critical(df: int) -> float:
    """The chi-square critical value at `CHI_SQUARE_Z` (Wilson-Hilferty; within 1% for df >= 3)."""
    k = 2 / (9 * df)
    return df * (1 - k + CHI_SQUARE_Z * math.sqrt(k)) ** 3


@pytest.fixture(autouse=True)
def threads() -> Iterator[None]:
    with model_threads():
        yield


@pytest.fixture(scope="module", params=ARCHITECTURES)
def model(request: pytest.FixtureRequest) -> torch.nn.Module:
    return tiny_model(request.param)


def assert_pool_whole(scheduler: Scheduler) -> None:
    assert not scheduler.has_work
    assert scheduler.cache.protected_size() == 0
    assert scheduler.allocator.available_tokens() + scheduler.cache.evictable_size() == scheduler.capacity


def model_steps(scheduler: Scheduler) -> int:
    stats = scheduler.runner.step_stats
    return stats.eager_steps + stats.static_steps


def compare_greedy(
    model: torch.nn.Module, requests: Callable[[], list[GenerateRequest]], **args: Any
) -> tuple[Scheduler, Scheduler, dict[str, Result]]:
    """Runs `requests()` without and with NGRAM; asserts equal outputs and a whole KV pool after;
    returns both schedulers and the speculative run's results."""
    plain, spec = make_scheduler(model, **args), make_scheduler(model, **args, **NGRAM)
    expected = run(plain, requests())
    got = run(spec, requests())
    for (rid, ours), theirs in zip(got.items(), expected.values()):
        assert ours.output_ids == theirs.output_ids, rid
        assert ours.finish_reason == theirs.finish_reason, rid
    assert_pool_whole(plain)
    assert_pool_whole(spec)
    return plain, spec, got


@pytest.mark.parametrize("batch", [1, 5])
def test_greedy_tokens_identical_with_fewer_steps(model: torch.nn.Module, batch: int) -> None:
    plain, spec, got = compare_greedy(
        model, lambda: [request(p, max_new_tokens=48) for p in prompts(batch, 10, seed=batch)]
    )
    generated = sum(len(r.output_ids) for r in got.values())
    assert spec.runner.step_stats.verify_steps > 0
    assert model_steps(spec) < model_steps(plain)
    assert model_steps(spec) < generated / batch, "a verify step must add more than one token a request"
    assert spec.stats["spec_accepted_tokens"] > 0
    meta = next(iter(got.values())).meta
    assert meta["spec_verify_ct"] > 0 and meta["spec_accept_length"] > 1
    assert 0 < meta["spec_accept_rate"] <= 1


@pytest.mark.parametrize("batch", [1, 3])
def test_captured_verify_steps_and_adaptive_drafts(model: torch.nn.Module, batch: int) -> None:
    """Verify steps replay the decode buckets (as decode rows over growing prefixes), with draft
    lengths that adapt: the same tokens as plain captured decoding; at batch 1 only the prefill
    runs eagerly."""
    args = {"captured": True, "max_running_requests": 16}
    plain, spec, _ = compare_greedy(
        model,
        lambda: [request(p, max_new_tokens=40) for p in prompts(batch, 10, seed=batch + 10)],
        **args,
        speculative_adaptive=True,
    )
    stats = spec.runner.step_stats
    assert stats.verify_steps > 0 and spec.stats["spec_accepted_tokens"] > 0
    assert model_steps(spec) < model_steps(plain)
    if batch == 1:
        assert stats.eager_steps == 1 and stats.static_fallbacks == 0, stats
    assert max(stats.captured_buckets) > batch, "no verify step ran as a bucket"


def test_shared_prefixes_chunked_prefill_and_pages(model: torch.nn.Module) -> None:
    """`n > 1`-style forks of one prompt and prompts sharing a prefix, run twice (the second time
    from the radix cache), prompts longer than the chunk, KV pages of 4 tokens (rejected drafts
    free part of a page)."""
    base = prompts(1, 30, seed=7)[0]

    def requests() -> list[GenerateRequest]:
        forks = [request(base, max_new_tokens=40) for _ in range(3)]
        return forks + [request(base[:20] + p, max_new_tokens=33) for p in prompts(2, 9, seed=8)]

    args = {"chunked_prefill_size": 16, "page_size": 4}
    plain, spec = make_scheduler(model, **args), make_scheduler(model, **args, **NGRAM)
    for _ in range(2):
        expected = [r.output_ids for r in run(plain, requests()).values()]
        assert [r.output_ids for r in run(spec, requests()).values()] == expected
        assert_pool_whole(spec)
    assert spec.stats["cached_tokens"] > 0
    assert spec.runner.step_stats.verify_steps > 0


def test_retraction_under_a_small_pool(model: torch.nn.Module) -> None:
    requests = lambda: [request(p, max_new_tokens=90) for p in prompts(6, 20, seed=3)]
    plain, spec, _ = compare_greedy(model, requests, kv_tokens=300)
    assert plain.stats["retractions"] > 0 and spec.stats["retractions"] > 0


def test_stops_and_max_new_tokens_inside_an_accepted_run(model: torch.nn.Module) -> None:
    """Every `max_new_tokens` from 1 to 30 (most land inside a run of accepted drafts), a stop
    token id and a stop string taken from the plain output's middle: the same tokens, reasons
    and logprobs."""
    prompt = prompts(1, 10, seed=11)[0]
    long = run(make_scheduler(model), [request(prompt, max_new_tokens=40)])
    out = next(iter(long.values())).output_ids

    def requests() -> list[GenerateRequest]:
        return [
            *(request(prompt, max_new_tokens=n) for n in range(1, 31)),
            request(prompt, max_new_tokens=40, stop_token_ids=[out[17]]),
            request(prompt, max_new_tokens=40, stop=f"<{out[21]}><{out[22]}>"),
            request(prompt, max_new_tokens=40, logprobs=True),
        ]

    _, _, got = compare_greedy(model, requests)
    results = list(got.values())
    assert [len(r.output_ids) for r in results[:30]] == list(range(1, 31))
    assert results[30].finish_reason["matched"] == out[17]
    assert results[31].finish_reason["matched"] == f"<{out[21]}><{out[22]}>"
    ours = results[32].meta["output_token_logprobs"]
    theirs = run(make_scheduler(model), [request(prompt, max_new_tokens=40, logprobs=True)])
    expected = next(iter(theirs.values())).meta["output_token_logprobs"]
    assert [t for _, t in ours] == [t for _, t in expected]
    assert max(abs(a - b) for (a, _), (b, _) in zip(ours, expected)) < 1e-4


def test_rejection_sampling_keeps_the_target_distribution() -> None:
    """`rejection_sample` of a point-mass draft against fixed (top-k filtered) distributions: the
    first token's frequencies match `p0`, and after an accepted draft the second's match `p1`."""
    gen = torch.Generator().manual_seed(0)
    probs = torch.rand(3, 8, generator=gen) ** 3
    probs = filter_probs(probs, torch.tensor([6, 6, 6]), torch.ones(3), torch.zeros(3))
    probs = probs / probs.sum(-1, keepdim=True)
    draft = [int(probs[0].argsort()[-2]), int(probs[1].argmax())]  # a likely but not the likeliest draft
    draws = 12_000
    firsts, seconds = Counter(), Counter()
    for _ in range(draws):
        tokens = rejection_sample(probs, draft, gen)
        firsts[tokens[0]] += 1
        if tokens[0] == draft[0]:
            seconds[tokens[1]] += 1
    for counts, p in ((firsts, probs[0]), (seconds, probs[1])):
        total = sum(counts.values())
        assert all(p[t] > 0 for t in counts), "a token outside top-k was drawn"
        support = [t for t in range(8) if p[t] > 0]
        stat = sum((counts[t] - total * float(p[t])) ** 2 / (total * float(p[t])) for t in support)
        assert stat < chi_square_critical(len(support) - 1), (stat, counts, p)


def two_sample_chi_square(ours: Counter, theirs: Counter) -> tuple[float, int]:
    """The statistic and degrees of freedom of "same distribution"; tokens seen under
    `RARE` times in both samples together share one bin (the test's approximation needs counts)."""
    pooled = ours + theirs
    bins = [[t] for t in pooled if pooled[t] >= RARE] + [[t for t in pooled if pooled[t] < RARE]]
    bins = [b for b in bins if b]
    n1, n2 = sum(ours.values()), sum(theirs.values())
    stat = 0.0
    for b in bins:
        a, c = sum(ours[t] for t in b), sum(theirs[t] for t in b)
        stat += (a * n2 - c * n1) ** 2 / (n1 * n2 * (a + c))
    return stat, len(bins) - 1


def test_speculative_sampling_matches_plain_sampling_on_a_tiny_vocabulary() -> None:
    """A model with an 8-token vocabulary, temperature 0.9 and top-k 6 over a looping prompt
    (NGRAM drafts every step, about 40% accepted): the second and third output tokens'
    frequencies with and without speculation pass a two-sample chi-square test."""
    model = tiny_model("LlamaForCausalLM", vocab_size=8, scale=0.5)
    counts = []
    for args in ({}, NGRAM):
        torch.manual_seed(0)
        scheduler = make_scheduler(model, **args)
        reqs = [request([1, 2, 3, 4] * 4, max_new_tokens=3, temperature=0.9, top_k=6) for _ in range(SAMPLES)]
        outputs = [r.output_ids for r in run(scheduler, reqs).values()]
        counts.append([Counter(o[i] for o in outputs) for i in (1, 2)])
        if args:
            assert scheduler.stats["spec_accepted_tokens"] > SAMPLES / 4
    for ours, theirs in zip(*counts):
        stat, df = two_sample_chi_square(ours, theirs)
        assert stat < chi_square_critical(df), (stat, ours, theirs)


def test_penalized_requests_are_not_drafted_for(model: torch.nn.Module) -> None:
    requests = lambda: [request(p, max_new_tokens=30, frequency_penalty=0.5) for p in prompts(2, 10, seed=5)]
    _, spec, _ = compare_greedy(model, requests)
    assert spec.runner.step_stats.verify_steps == 0


def test_embedded_model_answers_the_readme_question_the_same(rt: Runtime) -> None:
    """SmolLM2 with NGRAM: the same answer to the README's question, drafted from the prompt's
    own words ("capital of France") and accepted."""
    prompt = chat_prompt(rt.tokenizer)
    plain = rt.one(prompt, max_new_tokens=32)
    spec = rt.make_scheduler(**NGRAM)
    ours = next(iter(rt.run_on(spec, [make_request(prompt, max_new_tokens=32)]).values()))
    assert "Paris" in plain.text
    assert ours.text == plain.text and ours.output_ids == plain.output_ids
    assert spec.stats["spec_accepted_tokens"] > 0, spec.stats
    assert ours.meta["spec_verify_ct"] < len(ours.output_ids) - 1
    assert_pool_whole(spec)


@pytest.mark.parametrize("draft_seed", [0, 1])
def test_standalone_draft_model(model: torch.nn.Module, draft_seed: int) -> None:
    """STANDALONE: with the target as its own draft every drafted token is accepted; with another
    model as the draft fewer are; the tokens are the target's alone either way, and both pools
    are whole after."""
    architecture = model.config.architectures[0]
    draft = model if draft_seed == 0 else tiny_model(architecture, seed=draft_seed)
    requests = lambda: [request(p, max_new_tokens=30) for p in prompts(3, 12, seed=4)]
    expected = [r.output_ids for r in run(make_scheduler(model), requests()).values()]
    spec = make_standalone_scheduler(model, draft)
    assert [r.output_ids for r in run(spec, requests()).values()] == expected
    assert_pool_whole(spec)
    drafter = spec.speculator.drafter
    assert drafter.allocator.available_tokens() == 2048 and not drafter.states
    drafted, accepted = spec.stats["spec_draft_tokens"], spec.stats["spec_accepted_tokens"]
    assert drafted > 0
    if draft_seed == 0:
        assert accepted == drafted
    else:
        assert accepted < drafted


def test_flush_cache_empties_the_ngram_corpus(model: torch.nn.Module) -> None:
    """A finished request's tokens draft for the next requests (a request sent again verifies
    fewer steps); after `flush_cache` that is forgotten, as upstream's NGRAM worker forgets on a
    flush: the third run takes the first run's steps exactly."""
    spec = make_scheduler(model, **NGRAM)
    prompt = prompts(1, 10, seed=21)[0]

    def verify_steps() -> int:
        (result,) = run(spec, [request(prompt, max_new_tokens=48)]).values()
        return result.meta["spec_verify_ct"]

    first = verify_steps()
    again = verify_steps()
    assert spec.flush_cache()
    assert again < first
    assert verify_steps() == first
