"""Finish reasons and meta info: typed inside the runtime, SGLang's JSON at the edge; streamed
log-probabilities cross the processes as increments and are accumulated where outputs are built."""

from __future__ import annotations

import pytest

from sglang.runtime.processes.messages import LogprobRequest, TokenUpdate
from sglang.runtime.requests.finish_reason import FinishReason
from sglang.runtime.requests.meta_info import MetaInfo

from .runtime_harness import Runtime, chat_prompt, make_request


@pytest.mark.parametrize(
    ("reason", "shape"),
    [
        (FinishReason.stop(2), {"type": "stop", "matched": 2}),
        (FinishReason.stop(" Paris"), {"type": "stop", "matched": " Paris"}),
        (FinishReason.stop(None), {"type": "stop", "matched": None}),
        (FinishReason.of_length(7), {"type": "length", "length": 7}),
        (FinishReason.abort("gone"), {"type": "abort", "message": "gone", "status_code": 400}),
        (FinishReason.abort("step failed", 500), {"type": "abort", "message": "step failed", "status_code": 500}),
    ],
)
def test_finish_reason_json_keeps_upstreams_shapes(reason: FinishReason, shape: dict) -> None:
    assert reason.to_json() == shape


def test_streamed_logprobs_are_sent_as_increments_and_accumulated(rt: Runtime) -> None:
    """Each update of a streaming request carries only the logprobs of the tokens it adds; the
    accumulated meta_info of every output holds them all, with the cumulative length, and the
    final one equals the same request's non-streaming answer."""
    want = LogprobRequest(return_logprob=True, logprob_start_len=0, top_logprobs_num=2)
    prompt = chat_prompt(rt.tokenizer)
    streamed = make_request(prompt, logprobs=want, stream=True, max_new_tokens=5, ignore_eos=True)
    whole = make_request(prompt, logprobs=want, max_new_tokens=5, ignore_eos=True)
    scheduler = rt.make_scheduler()
    scheduler.add_request(streamed)
    updates: list[TokenUpdate] = []
    while scheduler.has_work:
        updates += [u for u in scheduler.step() if u.rid == streamed.rid]
    assert len(updates) == 5
    info = MetaInfo(want)
    lengths = []
    for update in updates:
        assert update.meta is not None
        delta = update.meta.logprobs
        assert [t for _, t in delta.output_token] == update.new_token_ids
        assert len(delta.output_top) == len(update.new_token_ids)
        info.add(update.meta)
        meta = info.to_json(streamed.rid, update.finish_reason)
        assert meta["output_token_logprobs_length"] == len(meta["output_token_logprobs"]) == meta["completion_tokens"]
        lengths.append(meta["output_token_logprobs_length"])
    assert lengths == [1, 2, 3, 4, 5]
    # The prompt's logprobs come once, with the first update.
    assert len(updates[0].meta.logprobs.input_token) == len(prompt)
    assert all(not u.meta.logprobs.input_token for u in updates[1:])
    reference = rt.run([whole])[whole.rid].meta
    for key in ("input_token_logprobs", "output_token_logprobs"):
        assert [t for _, t in meta[key]] == [t for _, t in reference[key]]
    assert [[t for _, t in row] for row in meta["output_top_logprobs"]] == [
        [t for _, t in row] for row in reference["output_top_logprobs"]
    ]
    assert meta["finish_reason"] == reference["finish_reason"] == {"type": "length", "length": 5}
