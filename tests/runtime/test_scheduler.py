"""The scheduler on the embedded model, driven in-process step by step: continuous batching,
chunked prefill, prefix cache, retraction under KV pressure, aborts, and KV accounting."""

from __future__ import annotations

import dataclasses
import random

import pytest

from sglang.runtime.processes.messages import GenerateRequest, LogprobRequest
from sglang.runtime.scheduler.policy import common_prefix_len
from sglang.runtime.scheduler.scheduler import Scheduler

from .runtime_harness import Runtime, chat_prompt, corpus_ids, make_request


def assert_kv_accounted(scheduler: Scheduler) -> None:
    """Every KV slot is either free or held (unlocked) by the prefix cache; a flush frees all."""
    assert not scheduler.has_work
    assert scheduler.cache.protected_size() == 0
    assert scheduler.allocator.available_tokens() + scheduler.cache.evictable_size() == scheduler.capacity
    assert scheduler.flush_cache()
    assert scheduler.allocator.available_tokens() == scheduler.capacity
    assert scheduler.cache.total_size() == 0


def burst_request(rt: Runtime, rng: random.Random, i: int) -> GenerateRequest:
    """Request `i` of the burst: random prompt and output lengths; every third samples with a
    seed, every fourth asks for logprobs, every fifth streams."""
    prompt = corpus_ids(rt.tokenizer, rng.randint(20, 140), offset=rng.randint(0, 60))
    logprobs = LogprobRequest(True, len(prompt) // 2, top_logprobs_num=2) if i % 4 == 2 else None
    sampling = {"temperature": 1.0, "seed": i} if i % 3 == 1 else {}
    return make_request(
        prompt,
        rid=f"burst-{i}",
        logprobs=logprobs,
        stream=i % 5 == 0,
        max_new_tokens=rng.randint(4, 20),
        ignore_eos=True,
        **sampling,
    )


def test_burst_under_kv_pressure_retracts_and_every_request_ends(rt: Runtime) -> None:
    """A burst of requests of random lengths on a 480-token pool with 48-token prefill chunks:
    requests are retracted and resumed, four are aborted midway, and every request ends exactly
    once, with the same tokens (greedy or seeded) and logprobs as in an unconstrained run; the
    pool is whole afterwards."""
    scheduler = rt.make_scheduler(max_total_tokens=480, chunked_prefill_size=48)
    rng = random.Random(7)
    requests = [burst_request(rt, rng, i) for i in range(20)]
    aborts = {2: ["burst-19"], 5: ["burst-3", "burst-11"], 9: ["burst-0"]}
    aborted = {rid for rids in aborts.values() for rid in rids}

    def abort_some(step: int, sched: Scheduler) -> None:
        for rid in aborts.get(step, []):
            sched.abort(rid, "test abort")

    outcomes = rt.run_on(scheduler, requests, between_steps=abort_some)

    assert scheduler.stats["retractions"] > 0, "the pool was meant to be too small for the burst"
    assert set(outcomes) == {r.rid for r in requests}
    for request in requests:
        outcome = outcomes[request.rid]
        if request.rid in aborted and outcome.finished_by == "abort":
            assert outcome.finish_reason["message"] == "test abort"
            assert len(outcome.output_ids) < request.params.max_new_tokens
        else:
            assert outcome.finished_by == "length", outcome.finish_reason
            assert len(outcome.output_ids) == request.params.max_new_tokens
            assert outcome.meta["completion_tokens"] == request.params.max_new_tokens
    assert sum(o.finished_by == "abort" for o in outcomes.values()) >= 3
    assert_kv_accounted(scheduler)

    # The same requests on the roomy shared pool, all at once: no retraction, no chunking.
    kept = [r for r in requests if r.rid not in aborted]
    reference = rt.run([dataclasses.replace(r, rid=f"ref-{r.rid}") for r in kept])
    for request in kept:
        ours, ref = outcomes[request.rid], reference[f"ref-{request.rid}"]
        assert ours.output_ids == ref.output_ids, request.rid
        if request.logprobs.return_logprob:
            for key in ("input_token_logprobs", "output_token_logprobs"):
                assert [t for _, t in ours.meta[key]] == [t for _, t in ref.meta[key]]
                assert [lp for lp, _ in ours.meta[key]] == pytest.approx([lp for lp, _ in ref.meta[key]], abs=2e-3)


def test_same_greedy_tokens_alone_and_inside_a_busy_batch(rt: Runtime) -> None:
    prompt = chat_prompt(rt.tokenizer)
    alone = rt.one(prompt, max_new_tokens=10)
    assert rt.tokenizer.decode(alone.output_ids).startswith("The capital of France is Paris")

    others = [
        make_request(corpus_ids(rt.tokenizer, n, offset=n), max_new_tokens=12, ignore_eos=True)
        for n in (9, 60, 130, 300)
    ]
    late = make_request(prompt, rid="late", max_new_tokens=10)

    def join_midway(step: int, sched: Scheduler) -> None:
        if step == 3:  # the others are decoding (and the longest still prefilling)
            assert len(sched.running) == len(others)
            sched.add_request(late)

    outcomes = rt.run(others, between_steps=join_midway)
    assert outcomes["late"].output_ids == alone.output_ids
    assert outcomes["late"].finish_reason == alone.finish_reason


def test_shared_prefix_is_reported_in_cached_tokens(rt: Runtime) -> None:
    prefix = corpus_ids(rt.tokenizer, 400, offset=17)
    question = rt.tokenizer.encode(" Question: what did the farmers bring?", add_special_tokens=False)
    other = rt.tokenizer.encode(" Question: when did the snow close the pass?", add_special_tokens=False)
    assert rt.scheduler.flush_cache()
    first = rt.one(prefix + question, max_new_tokens=2)
    second = rt.one(prefix + other, max_new_tokens=2)
    assert first.meta["cached_tokens"] == 0
    common = len(prefix) + next(i for i, (a, b) in enumerate(zip(question, other)) if a != b)
    assert second.meta["cached_tokens"] == common
    assert rt.scheduler.stats["cached_tokens"] >= common


def test_max_new_tokens_zero_returns_prompt_metadata_and_caches_the_prompt(rt: Runtime) -> None:
    prompt = corpus_ids(rt.tokenizer, 50, offset=101)
    assert rt.scheduler.flush_cache()
    scored = rt.one(prompt, max_new_tokens=0, logprobs=LogprobRequest(return_logprob=True, logprob_start_len=10))
    assert scored.output_ids == []
    assert scored.finish_reason == {"type": "length", "length": 0}
    assert scored.meta["prompt_tokens"] == 50
    assert scored.meta["completion_tokens"] == 0
    assert [t for _, t in scored.meta["input_token_logprobs"]] == prompt[10:]
    assert all(lp is not None and lp <= 0 for lp, _ in scored.meta["input_token_logprobs"])
    # The prompt's KV stayed in the prefix cache: only its last token is computed again.
    again = rt.one(prompt, max_new_tokens=1)
    assert again.meta["cached_tokens"] == len(prompt) - 1


def test_chunked_prefill_gives_the_same_tokens_as_one_prefill(rt: Runtime) -> None:
    prompt = corpus_ids(rt.tokenizer, 400, offset=5)
    whole = rt.run_on(
        rt.make_scheduler(max_total_tokens=1024, chunked_prefill_size=1024),
        [make_request(prompt, rid="whole", max_new_tokens=6, ignore_eos=True)],
    )
    chunked = rt.run_on(
        rt.make_scheduler(max_total_tokens=1024, chunked_prefill_size=96),
        [make_request(prompt, rid="chunked", max_new_tokens=6, ignore_eos=True)],
    )
    assert chunked["chunked"].output_ids == whole["whole"].output_ids


def test_abort_of_waiting_and_running_requests_frees_their_kv(rt: Runtime) -> None:
    scheduler = rt.make_scheduler(max_total_tokens=256, max_running_requests=1)
    running = make_request(corpus_ids(rt.tokenizer, 40), rid="running", max_new_tokens=50, ignore_eos=True)
    waiting = make_request(corpus_ids(rt.tokenizer, 30), rid="waiting", max_new_tokens=50, ignore_eos=True)

    def abort_both(step: int, sched: Scheduler) -> None:
        if step == 4:
            assert [r.rid for r in sched.running] == ["running"]
            assert not sched.flush_cache(), "a flush must be refused while requests run"
            sched.abort("waiting", "gone")
            sched.abort("running", "gone")
            sched.abort("unknown", "ignored")

    outcomes = rt.run_on(scheduler, [running, waiting], between_steps=abort_both)
    assert outcomes["waiting"].finish_reason == {"type": "abort", "message": "gone", "status_code": 400}
    assert outcomes["waiting"].output_ids == []
    assert outcomes["running"].finish_reason == {"type": "abort", "message": "gone", "status_code": 400}
    assert 0 < len(outcomes["running"].output_ids) < 50
    assert_kv_accounted(scheduler)


def test_prompt_larger_than_the_pool_is_aborted_with_a_reason(rt: Runtime) -> None:
    scheduler = rt.make_scheduler(max_total_tokens=64)
    outcomes = rt.run_on(scheduler, [make_request(corpus_ids(rt.tokenizer, 100), rid="big")])
    assert outcomes["big"].finished_by == "abort"
    assert "do not fit" in outcomes["big"].finish_reason["message"]
    assert_kv_accounted(scheduler)


@pytest.mark.parametrize("policy", ["fcfs", "lpm"])
def test_schedule_policies_serve_every_request(rt: Runtime, policy: str) -> None:
    scheduler = rt.make_scheduler(max_total_tokens=512, schedule_policy=policy, max_running_requests=2)
    prefix = corpus_ids(rt.tokenizer, 60, offset=3)
    requests = [make_request([*prefix, i + 100], max_new_tokens=3, ignore_eos=True) for i in range(5)]
    outcomes = rt.run_on(scheduler, requests)
    assert all(o.finished_by == "length" and len(o.output_ids) == 3 for o in outcomes.values())
    assert_kv_accounted(scheduler)


def test_requests_arriving_together_compute_their_shared_prefix_once(rt: Runtime) -> None:
    """Under lpm, one request prefills the shared prefix; the others wait for it to be cached and
    prefill only their own question. With fcfs every request computes the whole prompt."""
    prefix = corpus_ids(rt.tokenizer, 200, offset=40)
    questions = [rt.tokenizer.encode(f" Question {i}: who lived there?", add_special_tokens=False) for i in range(4)]
    computed = {}
    for policy in ("lpm", "fcfs"):
        scheduler = rt.make_scheduler(max_total_tokens=2048, schedule_policy=policy)
        requests = [make_request(prefix + q, rid=f"{policy}-{i}", max_new_tokens=2) for i, q in enumerate(questions)]
        outcomes = rt.run_on(scheduler, requests)
        cached = sorted(o.meta["cached_tokens"] for o in outcomes.values())
        computed[policy] = scheduler.stats["prompt_tokens"]
        if policy == "lpm":
            assert cached[0] == 0 and all(c >= len(prefix) for c in cached[1:]), cached
    total = sum(len(prefix) + len(q) for q in questions)
    assert computed["fcfs"] == total
    assert computed["lpm"] < len(prefix) + sum(len(q) for q in questions) + len(questions) * 8


def test_common_prefix_len() -> None:
    assert common_prefix_len([1, 2, 3, 4], [1, 2, 3, 9, 9]) == 3
    assert common_prefix_len([1, 2], [1, 2, 3]) == 2
    assert common_prefix_len([], [1]) == 0
    assert common_prefix_len([5], [6]) == 0


def test_a_prompt_is_shared_as_soon_as_its_prefill_ends_even_on_a_one_token_chunk(rt: Runtime) -> None:
    """65 prompt tokens in 32-token chunks end on a 1-token chunk; a request with the same prompt
    arriving while the first decodes reuses all of it."""
    scheduler = rt.make_scheduler(max_total_tokens=512, chunked_prefill_size=32)
    prompt = corpus_ids(rt.tokenizer, 65, offset=70)
    second = make_request(prompt, rid="second", max_new_tokens=2)

    def add_second(step: int, sched: Scheduler) -> None:
        if step == 4:  # steps 0-2 prefill the first request, step 3 decodes it
            assert sched.running[0].output_ids
            sched.add_request(second)

    outcomes = rt.run_on(scheduler, [make_request(prompt, rid="first", max_new_tokens=8)], between_steps=add_second)
    assert outcomes["second"].meta["cached_tokens"] == len(prompt) - 1
    assert outcomes["second"].output_ids == outcomes["first"].output_ids[:2]
