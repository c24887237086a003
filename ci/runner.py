"""The conformance suites and how one runs: a pytest process over the installed suite modules.

Suites ship inside the package (`sglang.ci.suites`), so a vendor runs them from an installed
wheel with no checkout: each suite is a list of module names pytest collects with `--pyargs`.
`SGLANG_TEST_DEVICE=<device>` narrows every suite's device parametrization to that device.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sglang.ci.report import SuiteResult, read_junit

DEVICE_ENV = "SGLANG_TEST_DEVICE"
PYTEST_NO_TESTS = 5


@dataclass(frozen=True)
class Suite:
    name: str
    modules: tuple[str, ...]
    needs_device: bool
    description: str


SUITES: tuple[Suite, ...] = (
    Suite(
        "static",
        ("sglang.ci.suites.test_declarations",),
        False,
        "declarations only: identity, capabilities, availability, kernel families (no device used)",
    ),
    Suite(
        "op_parity",
        (
            "sglang.ci.suites.test_op_parity",
            "sglang.ci.suites.test_device_runtime",
            "sglang.ci.suites.test_triton_capture",
            "sglang.ci.suites.test_triton_tuning",
        ),
        True,
        "every eligible kernel candidate of every op vs the reference; the device runtime; the Triton "
        "backend's capture hooks and tuning (where Triton launches: a GPU, or its interpreter)",
    ),
    Suite(
        "model_parity",
        ("sglang.ci.suites.test_model_parity",),
        True,
        "logits vs transformers on small random-weight models of every architecture",
    ),
    Suite(
        "e2e",
        ("sglang.ci.suites.e2e",),
        True,
        "native API, OpenAI API and frontend programs against a server on the device",
    ),
)

SUITES_BY_NAME = {s.name: s for s in SUITES}


def pytest_command(suite: Suite, junit_path: str | None, extra: Sequence[str] = ()) -> list[str]:
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--pyargs", *suite.modules, *extra]
    return [*command, f"--junitxml={junit_path}"] if junit_path else command


def run_suite(
    device: str,
    suite: Suite,
    env: Mapping[str, str] | None = None,
    extra: Sequence[str] = (),
    timeout: float = 3600,
    echo: bool = False,
) -> SuiteResult:
    """Runs `suite` for `device` in a child pytest; `env` adds to the environment (a target's
    interpreter switches). With `echo`, pytest's output streams to this process's stderr."""
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        junit = os.path.join(tmp, "junit.xml")
        environment = {**os.environ, DEVICE_ENV: device, **(env or {})}
        output = None if echo else subprocess.PIPE
        try:
            proc = subprocess.run(
                pytest_command(suite, junit, extra),
                env=environment,
                timeout=timeout,
                stdout=sys.stderr if echo else output,
                stderr=sys.stderr if echo else output,
                text=True,
                cwd=tmp,
            )
        except subprocess.TimeoutExpired:
            return SuiteResult(
                suite.name, device, (), time.perf_counter() - started, -1, problem=f"timed out after {timeout:.0f} s"
            )
        seconds = time.perf_counter() - started
        if not os.path.exists(junit):
            tail = ((proc.stdout or "") + (proc.stderr or "")).strip().splitlines()[-1:] or [""]
            return SuiteResult(
                suite.name,
                device,
                (),
                seconds,
                proc.returncode,
                problem=f"pytest exited {proc.returncode} without a report: {tail[0]}",
            )
        cases = tuple(read_junit(Path(junit).read_text()))
    problem = ""
    if proc.returncode not in (0, 1, PYTEST_NO_TESTS):
        problem = f"pytest exited {proc.returncode}"
    return SuiteResult(suite.name, device, cases, seconds, proc.returncode, problem)
