"""The shipped e2e suite against a `--device tpu` server on XLA:CPU, as the conformance matrix runs it.

The suite runs in a child pytest (`sglang.ci.runner.run_suite`) with `SGLANG_TEST_DEVICE=tpu` and
`JAX_PLATFORMS=cpu`, so its session-scoped server is started once, on the tpu platform, and this
session never sees the tpu platform as available. Every CI run takes the `e2e_core` subset (the
native API, the OpenAI API with streaming and bad input, a few frontend programs); the whole suite
is slow (20 minutes here: every batch shape it produces is a compiled step, 20 of them, and
XLA:CPU runs them slowly).
"""

from __future__ import annotations

import pytest

from sglang.ci.report import SuiteResult
from sglang.ci.runner import SUITES_BY_NAME, run_suite

CORE_TIMEOUT_S = 900
"""A hung server fails the test instead of stalling CI; the subset takes about 3 minutes."""


def run_e2e(*pytest_args: str, timeout: float) -> SuiteResult:
    """Runs the suite (narrowed by `pytest_args`); fails with every failing case's first line."""
    result = run_suite("tpu", SUITES_BY_NAME["e2e"], {"JAX_PLATFORMS": "cpu"}, pytest_args, timeout)
    assert not result.problem, result.problem
    failures = [f"{c.name}: {c.message}" for c in result.failures]
    assert not failures, "\n".join(failures)
    # Every case counted ran against the tpu server (its id names the device).
    assert result.passed == len(result.cases) - sum(result.skip_reasons().values())
    assert not result.skip_reasons(), result.skip_reasons()
    assert result.passed, "no case ran"
    print(f"e2e on the tpu platform (XLA:CPU): {result.passed} passed in {result.seconds:.0f} s")
    return result


def test_e2e_core_subset() -> None:
    result = run_e2e("-m", "e2e_core and not slow", timeout=CORE_TIMEOUT_S)
    names = {c.name.partition("[")[0] for c in result.cases}
    # One case of each API: native /generate, OpenAI chat and completions, a frontend program.
    assert {"test_generate_single", "test_chat", "test_completion", "test_program"} <= names, names


@pytest.mark.slow
def test_e2e_whole_suite() -> None:
    run_e2e(timeout=3 * 3600)
