"""A step that raises fails only its own requests: their slots are freed (never cached, since the
step may have half-written them), other requests go on, and the next request is served."""

from __future__ import annotations

import pytest

from sglang.ops.step import StepError, StepInputs
from sglang.runtime.scheduler.scheduler import Scheduler
from sglang.runtime.server.errors import ApiError
from sglang.runtime.server.native_api import raise_server_failure

from .runtime_harness import Runtime, corpus_ids, make_request
from .test_scheduler import assert_kv_accounted


class FailingRunner:
    """The scheduler's runner, raising `error` for every step whose batch holds a prompt of
    `poisoned_len` tokens (so the failing request is known, whatever the batch around it)."""

    def __init__(self, runner: object, poisoned_len: int, error: Exception) -> None:
        self.runner = runner
        self.poisoned_len = poisoned_len
        self.error = error
        self.failures = 0
        self.model, self.platform, self.num_slots = runner.model, runner.platform, runner.num_slots
        self.step_stats = runner.step_stats

    def forward(self, step: StepInputs):
        if self.poisoned_len in step.attention.seq_lens:
            self.failures += 1
            raise self.error
        return self.runner.forward(step)


@pytest.mark.parametrize("error", [RuntimeError("kernel exploded"), StepError("shape failed to compile")])
def test_a_failing_step_fails_only_its_requests(rt: Runtime, error: Exception) -> None:
    scheduler: Scheduler = rt.make_scheduler(max_total_tokens=512, max_running_requests=2)
    poisoned = make_request(corpus_ids(rt.tokenizer, 77, offset=7), rid="poisoned", max_new_tokens=12)
    beside = make_request(corpus_ids(rt.tokenizer, 30), rid="beside", max_new_tokens=12, ignore_eos=True)
    later = make_request(corpus_ids(rt.tokenizer, 30), rid="later", max_new_tokens=12, ignore_eos=True)
    scheduler.runner = FailingRunner(scheduler.runner, poisoned_len=77, error=error)

    outcomes = rt.run_on(scheduler, [poisoned, beside, later])

    assert scheduler.runner.failures == 1, "the step failed once; its requests did not come back"
    for rid in ("poisoned", "beside"):  # both prefilled in the failing step
        reason = outcomes[rid].finish_reason
        assert reason["type"] == "abort" and reason["status_code"] == 500, reason
        assert type(error).__name__ in reason["message"] and str(error) in reason["message"]
        assert outcomes[rid].output_ids == []
    # The request waiting for a running slot was not in the step: it is served after it.
    assert outcomes["later"].finish_reason["type"] == "length"
    assert len(outcomes["later"].output_ids) == 12
    # The failed step's slots were freed, not cached: only `later`'s prompt and output are.
    assert scheduler.cache.total_size() <= 30 + 12
    assert_kv_accounted(scheduler)


def test_failed_requests_answer_with_their_status() -> None:
    failed = {"meta_info": {"finish_reason": {"type": "abort", "message": "boom", "status_code": 500}}}
    refused = {"meta_info": {"finish_reason": {"type": "abort", "message": "no", "status_code": 400}}}
    with pytest.raises(ApiError) as raised:
        raise_server_failure([refused, failed])
    assert raised.value.status == 500 and raised.value.message == "boom"
    raise_server_failure(refused)  # a request the client got wrong keeps its 200 with the abort reason
