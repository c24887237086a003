"""The spans the scheduler and the detokenizer report for traced requests.

The scheduler's three stages are derived from the request's final `RequestMeta` (its latencies
are seconds from arrival, on the system-wide monotonic clock), so the scheduler itself keeps no
tracing state: `queue` ends at the first admission, `prefill` at the first output token,
`decode` at the end. A stage the request never reached has no span (an abort in the queue
leaves only `queue`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from sglang.runtime.observability.tracing import StageTracer
from sglang.runtime.processes.messages import TokenUpdate

_NS = 1_000_000_000


def report_scheduler_stages(tracer: StageTracer, updates: list[TokenUpdate]) -> None:
    """Spans of every traced request that finished among `updates` (sent just now)."""
    now = time.time_ns()
    for update in updates:
        meta = update.meta
        if update.trace is None or update.finish_reason is None or meta is None:
            continue
        arrival = now - int(meta.e2e_latency * _NS)
        admitted = now if meta.queue_time is None else arrival + int(meta.queue_time * _NS)
        tracer.record(update.trace, "queue", arrival, admitted)
        if meta.queue_time is None:
            continue
        first = now if meta.ttft is None else arrival + int(meta.ttft * _NS)
        prompt = {"prompt_tokens": meta.prompt_tokens, "cached_tokens": meta.cached_tokens}
        tracer.record(update.trace, "prefill", admitted, first, prompt)
        if meta.ttft is None:
            continue
        attributes = {
            "completion_tokens": meta.completion_tokens,
            "finish_reason": update.finish_reason.kind,
        }
        if meta.itl is not None:
            attributes["mean_inter_token_latency_s"] = meta.itl
        if meta.spec_verify_ct:
            attributes |= {
                "spec_draft_tokens": meta.spec_draft_tokens,
                "spec_accepted_tokens": meta.spec_accepted_tokens,
            }
        tracer.record(update.trace, "decode", first, now, attributes)


@dataclass
class _Timing:
    first_ns: int
    busy_ns: int = 0
    updates: int = 0


class DetokenizeSpans:
    """One `detokenize` span per traced request: from the start of its first update's
    detokenization to the end of its last, with the time actually spent as `busy_ms`."""

    def __init__(self, tracer: StageTracer) -> None:
        self.tracer = tracer
        self.open: dict[str, _Timing] = {}

    def observe(self, update: TokenUpdate, start_ns: int, end_ns: int) -> None:
        if update.trace is None:
            return
        timing = self.open.setdefault(update.rid, _Timing(start_ns))
        timing.busy_ns += end_ns - start_ns
        timing.updates += 1
        if update.finish_reason is not None:
            del self.open[update.rid]
            attributes = {"busy_ms": timing.busy_ns / 1e6, "updates": timing.updates}
            self.tracer.record(update.trace, "detokenize", timing.first_ns, end_ns, attributes)
