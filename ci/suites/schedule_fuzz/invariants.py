"""What must hold after any workload on any target, whatever the schedule.

- Every request finishes exactly once: a plain request returns one final output per sequence
  (`n` of them), each with a finish reason; a stream delivers cumulative chunks of which only
  the last carries a finish reason, unless the client closed it early, in which case none does.
- Logprobs, when asked, come one per output token.
- After the run every KV slot is back: once the scheduler holds no request, the allocator's free
  slots plus the radix cache's holdings equal the pool, and nothing in the cache is still locked.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

from sglang.ci.suites.schedule_fuzz.driver import RequestOutcome
from sglang.runtime.engine import Engine

IDLE_TIMEOUT_S = 60.0
"""Aborts reach the scheduler asynchronously; it must drop every request within this time."""


def delivery_problems(outcome: RequestOutcome) -> list[str]:
    """Every way `outcome` breaks the finish-exactly-once and logprob-count rules (none: [])."""
    spec = outcome.spec
    if outcome.error is not None:
        return [f"an exception escaped: {outcome.error}"]
    problems = []
    if spec.stream:
        finishes = [i for i, c in enumerate(outcome.chunks) if c["meta_info"]["finish_reason"] is not None]
        allowed = [] if outcome.closed_early else [len(outcome.chunks) - 1]
        if finishes != allowed:
            problems.append(f"finish reasons on chunks {finishes} of {len(outcome.chunks)}, expected {allowed}")
        for before, after in itertools.pairwise(outcome.chunks):
            if after["output_ids"][: len(before["output_ids"])] != before["output_ids"]:
                problems.append("stream chunks are not cumulative")
                break
    elif len(outcome.outputs) != spec.n:
        problems.append(f"{len(outcome.outputs)} outputs for n={spec.n}")
    for output in outcome.outputs:
        meta, ids = output["meta_info"], output["output_ids"]
        if len(ids) > spec.max_new_tokens:
            problems.append(f"{len(ids)} tokens past max_new_tokens={spec.max_new_tokens}")
        if not outcome.closed_early and meta["finish_reason"] is None:
            problems.append("a sequence ended without a finish reason")
        if spec.top_logprobs_num is not None and len(meta["output_token_logprobs"]) != len(ids):
            problems.append(f"{len(meta['output_token_logprobs'])} output logprobs for {len(ids)} tokens")
    return problems


def settled_server_info(engine: Engine) -> dict[str, Any]:
    """The scheduler's counters once it holds no request (aborts may still be on their way)."""
    deadline = time.monotonic() + IDLE_TIMEOUT_S
    while True:
        info = engine.get_server_info()
        if info["num_running_requests"] == 0 and info["num_waiting_requests"] == 0:
            return info
        if time.monotonic() > deadline:
            raise AssertionError(f"requests still held {IDLE_TIMEOUT_S:.0f} s after the workload: {info}")
        time.sleep(0.1)


def kv_problems(info: dict[str, Any]) -> list[str]:
    """How the idle scheduler's KV accounting is off (none: [])."""
    free, cached, total = info["kv_tokens_free"], info["kv_tokens_cached"], info["kv_tokens_total"]
    problems = []
    if free + cached != total:
        problems.append(f"KV slots lost: {free} free + {cached} cached != {total} in the pool")
    if info["kv_tokens_evictable"] != cached:
        problems.append(f"{cached - info['kv_tokens_evictable']} cached tokens still locked with no request")
    return problems
