"""The conformance matrix: how cells are judged, and that it never reports an untested device as tested."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglang.ci import matrix
from sglang.ci.report import SuiteResult, names_device, read_junit


def junit(*cases: tuple[str, str | None, str]) -> str:
    """A junit report from (test name, outcome tag or None for passed, skip message)."""
    body = "".join(
        f'<testcase classname="t" name="{name}">' + (f'<{tag} message="{message}"/>' if tag else "") + "</testcase>"
        for name, tag, message in cases
    )
    return f'<testsuites><testsuite name="pytest">{body}</testsuite></testsuites>'


@pytest.mark.parametrize(
    ("name", "device", "expected"),
    [
        ("test_x[cpu-rms_norm-torch.float32]", "cpu", True),
        ("test_x[cpu-rms_norm-torch.float32]", "cuda", False),
        ("test_x[cuda]", "cuda", True),
        ("test_x[cudagraph-1]", "cuda", False),
        ("test_plain", "cpu", False),
    ],
)
def test_names_device(name: str, device: str, expected: bool) -> None:
    assert names_device(name, device) is expected


def judge(xml: str, device: str = "cpu", returncode: int = 0, problem: str = ""):
    return matrix.judge(SuiteResult("suite", device, tuple(read_junit(xml)), 1.0, returncode, problem))


def test_pass_counts_only_tests_parametrized_by_the_device() -> None:
    outcome = judge(junit(("a[cpu-x]", None, ""), ("b[cpu-y]", "skipped", "bf16 unsupported"), ("c", None, "")))
    assert (outcome.status, outcome.detail) == ("pass", "1 passed, 1 skipped")


def test_a_failure_or_error_fails_the_cell() -> None:
    assert judge(junit(("a[cpu]", None, ""), ("b[cpu]", "failure", "boom")), returncode=1).status == "FAIL"
    assert judge(junit(("a[cpu]", "error", "fixture broke")), returncode=1).status == "FAIL"
    assert judge(junit(), returncode=4, problem="pytest exited 4").status == "FAIL"  # usage error


def test_all_skipped_reports_the_reasons() -> None:
    outcome = judge(junit(("a[tpu]", "skipped", "tpu: jax is not installed")), device="tpu")
    assert (outcome.status, outcome.detail) == ("skipped", "tpu: jax is not installed")


def test_device_agnostic_passes_are_not_a_pass_for_the_device() -> None:
    outcome = judge(junit(("test_plain", None, ""), ("test_x[cpu]", None, "")), device="cuda")
    assert outcome.status == "no tests"
    assert judge(junit(), returncode=5).status == "no tests"
    assert judge(junit()).detail == "nothing collected"


def test_unavailable_devices_are_not_run_except_static_checks() -> None:
    ran = []

    def runner(device, suite):
        ran.append((device, suite.name))
        return matrix.Outcome("pass", "1 passed")

    availability = {"cpu": (True, ""), "npu": (False, "torch_npu is not installed")}
    targets = [matrix.Target("cpu", "cpu"), matrix.Target("npu", "npu")]
    results = matrix.run_matrix(targets, matrix.SUITES, availability, lambda t, s: runner(t.device, s))
    assert ("npu", "static") in ran and ("cpu", "op_parity") in ran
    assert not any(device == "npu" and suite != "static" for device, suite in ran)
    assert results["npu", "op_parity"] == matrix.Outcome("not run here", "torch_npu is not installed")
    table = matrix.render(targets, matrix.SUITES, results)
    assert "not run here (torch_npu is not installed)" in table
    assert table.splitlines()[0].split(" | ")[0].strip() == "target"


def test_the_interpreter_target_is_labelled_and_runs_only_its_suites() -> None:
    interpreter = matrix.known_targets()["triton-interpreter"]
    assert interpreter.device == "cpu" and ("TRITON_INTERPRET", "1") in interpreter.env
    assert "interpreter" in interpreter.label and "not a GPU" in interpreter.label
    seen = []
    results = matrix.run_matrix(
        [interpreter],
        matrix.SUITES,
        {interpreter.name: (True, "")},
        lambda t, s: seen.append(s.name) or matrix.Outcome("pass", "1 passed"),
    )
    assert seen == ["op_parity", "model_parity"]
    # Issue 29: the Triton backend's capture and tuning tests run in this row, not only on a GPU.
    op_parity = next(s for s in matrix.SUITES if s.name == "op_parity")
    assert {"sglang.ci.suites.test_triton_capture", "sglang.ci.suites.test_triton_tuning"} <= set(op_parity.modules)
    assert results["triton-interpreter", "e2e"].status == "n/a"
    table = matrix.render([interpreter], matrix.SUITES, results)
    assert table.splitlines()[-1] == f"triton-interpreter: {interpreter.label}"


def test_real_run_of_an_unavailable_device(tmp_path: Path) -> None:
    """End to end: the static suite runs for real; device suites are reported as not run."""
    from sglang.platforms.registry import known_platforms, platform_class

    absent = next((n for n in known_platforms() if not platform_class(n).is_available()), None)
    if absent is None:
        pytest.skip("every known device is available here")
    out = tmp_path / "cells.json"
    code = matrix.main(["--devices", absent, "--suites", "static,op_parity", "--json", str(out)])
    cells = {c["suite"]: c for c in json.loads(out.read_text())}
    assert code == 0
    assert cells["static"]["status"] == "pass"
    assert cells["op_parity"]["status"] == "not run here"
    assert cells["op_parity"]["detail"] == platform_class(absent).availability().reason


def test_the_tpu_on_xla_cpu_target_is_labelled_and_probed_in_its_environment() -> None:
    target = matrix.known_targets()["tpu-xla-cpu"]
    assert target.device == "tpu" and ("JAX_PLATFORMS", "cpu") in target.env
    assert "XLA:CPU" in target.label and "not a TPU" in target.label
    probe = matrix.Target("cpu-probe", device="cpu", env=(("SGLANG_TEST_PROBE", "1"),))
    assert matrix.target_availability([probe]) == {"cpu-probe": (True, "")}
