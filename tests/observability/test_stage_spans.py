"""The scheduler's stage spans derived from a request's final `RequestMeta`: a request that
finished has queue, prefill and decode back to back ending now; one aborted while waiting has
only its queue span; untraced or unfinished updates make none."""

from __future__ import annotations

import time
from typing import Any

from sglang.runtime.observability.stage_spans import report_scheduler_stages
from sglang.runtime.observability.tracing import TraceCarrier
from sglang.runtime.processes.messages import LogprobDelta, RequestMeta, TokenUpdate
from sglang.runtime.requests.finish_reason import FinishReason

CARRIER = TraceCarrier((("traceparent", f"00-{'1' * 32}-{'2' * 16}-01"),))
NO_LOGPROBS = LogprobDelta([], [], [], [], [], [], [])


class Recorder:
    """Keeps what `StageTracer.record` is asked to export."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, int, int, dict[str, Any]]] = []

    def record(self, carrier: TraceCarrier, name: str, start: int, end: int, attrs: Any = None) -> None:
        assert carrier == CARRIER
        self.spans.append((name, start, end, attrs or {}))


def meta(**kw: Any) -> RequestMeta:
    base = dict(prompt_tokens=5, completion_tokens=4, cached_tokens=1, e2e_latency=1.0, ttft=0.5, itl=0.1)
    return RequestMeta(**(base | kw), logprobs=NO_LOGPROBS)


def test_finished_request_has_three_contiguous_stages() -> None:
    recorder = Recorder()
    update = TokenUpdate("r", [1], FinishReason.of_length(4), meta(queue_time=0.2), trace=CARRIER)
    before = time.time_ns()
    report_scheduler_stages(recorder, [update])  # type: ignore[arg-type]
    (queue, prefill, decode) = recorder.spans
    assert [s[0] for s in recorder.spans] == ["queue", "prefill", "decode"]
    assert queue[2] == prefill[1] and prefill[2] == decode[1]
    assert decode[2] >= before
    assert abs((decode[2] - queue[1]) - 1_000_000_000) < 1000  # e2e_latency
    assert abs((prefill[1] - queue[1]) - 200_000_000) < 1000  # queue_time
    assert abs((prefill[2] - queue[1]) - 500_000_000) < 1000  # ttft
    assert decode[3]["completion_tokens"] == 4 and decode[3]["finish_reason"] == "length"
    assert prefill[3] == {"prompt_tokens": 5, "cached_tokens": 1}


def test_abort_in_queue_has_only_queue() -> None:
    recorder = Recorder()
    aborted = meta(completion_tokens=0, ttft=None, itl=None)
    report_scheduler_stages(recorder, [TokenUpdate("r", [], FinishReason.abort("x"), aborted, trace=CARRIER)])  # type: ignore[arg-type]
    assert [s[0] for s in recorder.spans] == ["queue"]


def test_untraced_or_running_updates_make_none() -> None:
    recorder = Recorder()
    updates = [
        TokenUpdate("a", [1], FinishReason.of_length(1), meta(queue_time=0.1)),
        TokenUpdate("b", [1], None, meta(queue_time=0.1), trace=CARRIER),
    ]
    report_scheduler_stages(recorder, updates)  # type: ignore[arg-type]
    assert recorder.spans == []
