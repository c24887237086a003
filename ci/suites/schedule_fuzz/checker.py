"""The differential check of one workload on one target: run it, hold every request to the
delivery rules and every greedy sequence to the oracle, then check the idle scheduler's KV."""

from __future__ import annotations

from typing import Any

from sglang.ci.suites.schedule_fuzz.driver import run_workload
from sglang.ci.suites.schedule_fuzz.invariants import delivery_problems, kv_problems, settled_server_info
from sglang.ci.suites.schedule_fuzz.oracle import Oracle, compare
from sglang.ci.suites.schedule_fuzz.workload import Workload
from sglang.runtime.engine import Engine


def check_workload(engine: Engine, oracle: Oracle, workload: Workload) -> tuple[list[str], dict[str, Any]]:
    """The near ties met (each a line) and the idle scheduler's server info; raises
    AssertionError naming the workload and every problem when anything is wrong."""
    problems: list[str] = []
    near_ties: list[str] = []
    for i, outcome in enumerate(run_workload(engine, workload)):
        problems += [f"[{i}] {p}" for p in delivery_problems(outcome)]
        if outcome.error is not None or not outcome.spec.greedy:
            continue  # sampled sequences are checked for their structure only
        reference = oracle.answer(outcome.spec)
        for output in outcome.outputs:
            verdict = compare(output, reference, complete=not outcome.closed_early)
            if not verdict.ok:
                problems.append(f"[{i}] differs from the oracle: {verdict.detail}")
            elif verdict.near_tie:
                near_ties.append(f"[{i}] {outcome.spec.describe()}: {verdict.detail}")
    info = settled_server_info(engine)
    problems += kv_problems(info)
    assert not problems, "schedule failed:\n" + workload.describe() + "\nproblems:\n" + "\n".join(problems)
    return near_ties, info
