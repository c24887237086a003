"""Log-probabilities the scheduler reports, checked against one direct forward pass of the model
over the whole sequence: output and input token logprobs, top logprobs, logprobs of chosen ids,
`logprob_start_len`, `normalized_prompt_logprob`, and chunked prefill."""

from __future__ import annotations

import pytest
import torch

from sglang.ops.attention import AttentionInputs
from sglang.ops.step import StepInputs
from sglang.runtime.execution.model_runner import ModelRunner
from sglang.runtime.memory.token_allocator import PagedTokenAllocator
from sglang.runtime.processes.messages import LogprobRequest

from .runtime_harness import Runtime, chat_prompt, corpus_ids, make_request, model_threads

ATOL = 1e-2
"""Decoding token by token and one prefill of the whole sequence compute differently: the session
model is the quantized GGUF, whose decode linears take int16-rounded activations (up to 4e-3 on
its logits, tests/models/test_quantized_model.py) where a long prefill multiplies in float32. A
wrong token or position is off by far more."""


def direct_logprobs(rt: Runtime, token_ids: list[int]) -> torch.Tensor:
    """`[len(token_ids), V]` log-softmax of the model's logits at every position, from a single
    prefill on a private KV pool."""
    n = len(token_ids)
    allocator = PagedTokenAllocator(n + 2, 1)
    base = rt.scheduler.runner
    runner = ModelRunner(base.model, base.platform, allocator.num_slots)
    step = StepInputs(
        input_ids=torch.tensor(token_ids),
        positions=torch.arange(n),
        attention=AttentionInputs(seq_lens=(n,), extend_lens=(n,), kv_slots=allocator.alloc_extend(None, n)),
        logit_rows=torch.arange(n),
    )
    return runner.forward(step).float().log_softmax(-1).cpu()


@pytest.fixture(scope="module")
def scored(runtime: Runtime) -> tuple[list[int], dict, torch.Tensor]:
    """A greedy request asking for every kind of logprob, and the direct forward's logprobs."""
    prompt = chat_prompt(runtime.tokenizer)
    want = LogprobRequest(return_logprob=True, logprob_start_len=0, top_logprobs_num=5, token_ids_logprob=(2, 504, 7))
    request = make_request(prompt, logprobs=want, max_new_tokens=6)
    with model_threads():
        outcome = runtime.run([request])[request.rid]
        reference = direct_logprobs(runtime, prompt + outcome.output_ids[:-1])
    return prompt, {"output_ids": outcome.output_ids, **outcome.meta}, reference


def test_output_token_logprobs_are_the_models_log_softmax(scored) -> None:
    prompt, meta, reference = scored
    assert [t for _, t in meta["output_token_logprobs"]] == meta["output_ids"]
    for j, (logprob, token) in enumerate(meta["output_token_logprobs"]):
        row = reference[len(prompt) - 1 + j]
        assert int(row.argmax()) == token, "greedy picks the most likely token"
        assert logprob == pytest.approx(float(row[token]), abs=ATOL)


def test_input_token_logprobs_score_each_prompt_token_from_its_prefix(scored) -> None:
    prompt, meta, reference = scored
    assert meta["input_token_logprobs"][0] == (None, prompt[0])
    assert [t for _, t in meta["input_token_logprobs"]] == prompt
    for q, (logprob, token) in enumerate(meta["input_token_logprobs"][1:], start=1):
        assert logprob == pytest.approx(float(reference[q - 1, token]), abs=ATOL)
    scores = [lp for lp, _ in meta["input_token_logprobs"][1:]]
    assert meta["normalized_prompt_logprob"] == pytest.approx(sum(scores) / len(scores))


def test_top_logprobs_are_the_most_likely_tokens_sorted(scored) -> None:
    prompt, meta, reference = scored
    assert len(meta["output_top_logprobs"]) == len(meta["output_ids"])
    for j, top in enumerate(meta["output_top_logprobs"]):
        values = [lp for lp, _ in top]
        assert len(top) == 5
        assert values == sorted(values, reverse=True)
        expected = reference[len(prompt) - 1 + j].topk(5)
        assert [t for _, t in top] == expected.indices.tolist()
        assert values == pytest.approx(expected.values.tolist(), abs=ATOL)
    assert meta["input_top_logprobs"][0] is None
    assert [t for _, t in meta["input_top_logprobs"][3]] == reference[2].topk(5).indices.tolist()


def test_token_ids_logprob_reports_the_asked_ids_in_order(scored) -> None:
    prompt, meta, reference = scored
    for j, entries in enumerate(meta["output_token_ids_logprobs"]):
        assert [t for _, t in entries] == [2, 504, 7]
        row = reference[len(prompt) - 1 + j]
        assert [lp for lp, _ in entries] == pytest.approx([float(row[t]) for t in (2, 504, 7)], abs=ATOL)
    assert len(meta["input_token_ids_logprobs"]) == len(prompt)


def test_logprob_start_len_selects_the_scored_prompt_tokens(rt: Runtime) -> None:
    prompt = corpus_ids(rt.tokenizer, 60, offset=9)
    reference = direct_logprobs(rt, prompt)
    asked = {start: LogprobRequest(return_logprob=True, logprob_start_len=start) for start in (-1, 1, 25, 59)}
    requests = {start: make_request(prompt, logprobs=lp, max_new_tokens=1) for start, lp in asked.items()}
    # Chunked prefill (16-token chunks) must report the same positions and values.
    chunked = rt.make_scheduler(max_total_tokens=512, chunked_prefill_size=16)
    for scheduler_outcomes in (
        rt.run(requests.values()),
        rt.run_on(
            chunked,
            [
                make_request(prompt, rid=f"chunked-{r.rid}", logprobs=r.logprobs, max_new_tokens=1)
                for r in requests.values()
            ],
        ),
    ):
        by_start = {
            start: next(o for rid, o in scheduler_outcomes.items() if rid.endswith(requests[start].rid))
            for start in asked
        }
        assert by_start[-1].meta["input_token_logprobs"] == []
        assert by_start[-1].meta["normalized_prompt_logprob"] is None
        for start in (1, 25, 59):
            entries = by_start[start].meta["input_token_logprobs"]
            assert [t for _, t in entries] == prompt[start:]
            assert [lp for lp, _ in entries] == pytest.approx(
                [float(reference[q - 1, prompt[q]]) for q in range(start, len(prompt))], abs=ATOL
            )
        assert by_start[25].meta["normalized_prompt_logprob"] == pytest.approx(
            sum(lp for lp, _ in by_start[25].meta["input_token_logprobs"]) / 35
        )


def test_logprobs_with_a_cached_prefix_recompute_what_is_asked(rt: Runtime) -> None:
    """A prompt whose prefix is cached still gets logprobs for every asked position."""
    prompt = corpus_ids(rt.tokenizer, 40, offset=33)
    rt.one(prompt, max_new_tokens=1)  # caches the prompt
    want = LogprobRequest(return_logprob=True, logprob_start_len=10)
    again = rt.one(prompt, logprobs=want, max_new_tokens=1)
    assert [t for _, t in again.meta["input_token_logprobs"]] == prompt[10:]
    assert again.meta["cached_tokens"] <= 9
