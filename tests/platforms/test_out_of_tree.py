"""An out-of-tree device, installed as its own package, joins through entry points alone.

The toy plugin (tests/plugins/toy_device) registers a platform (`sglang.platforms`) and a kernel
family (`sglang.kernel_families`). Installed into a folder of its own and put on the path of a
child process, it is selectable, `sglang ops` shows its kernels chosen, and op parity runs its
kernels; a deliberately broken kernel fails op parity with the op named. Nothing in sglang
changes for it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "tests" / "plugins" / "toy_device"
TOY_OP_PARITY = (
    "-m",
    "pytest",
    "-q",
    "-p",
    "no:cacheprovider",
    "--pyargs",
    "sglang.ci.suites.test_op_parity",
    "-k",
    "toy_kernels",
)


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("toy-plugin")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(PLUGIN),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return target


def run(plugin_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(plugin_path), **env}
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=600
    )


def test_the_plugin_is_a_selectable_device_with_its_own_kernels(plugin_path: Path) -> None:
    result = run(plugin_path, "-m", "sglang.cli", "ops", "--device", "toy", "--json")
    assert result.returncode == 0, result.stderr
    chosen = {row["op"]: row["family"] for row in json.loads(result.stdout)["ops"]}
    assert {op for op, family in chosen.items() if family == "toy_kernels"} == {
        "rms_norm",
        "silu_and_mul",
        "log_softmax",
    }
    assert chosen["attention_backend"] == "torch_native"


def test_the_plugin_passes_op_parity(plugin_path: Path) -> None:
    result = run(plugin_path, *TOY_OP_PARITY, SGLANG_TEST_DEVICE="toy")
    assert result.returncode == 0, result.stdout[-3000:]
    # 2 rms_norm cases in fp32 (the toy kernel declares fp32 only), 2 cases each of silu_and_mul
    # and log_softmax in fp32 and bf16 (the toy platform's dtypes): every one ran and passed.
    assert re.search(r"\b10 passed", result.stdout), result.stdout[-3000:]


def test_a_broken_plugin_kernel_fails_op_parity_by_name(plugin_path: Path) -> None:
    result = run(plugin_path, *TOY_OP_PARITY, SGLANG_TEST_DEVICE="toy", SGLANG_TOY_BROKEN_OP="silu_and_mul")
    assert result.returncode == 1, result.stdout[-3000:]
    failed = [line for line in result.stdout.splitlines() if line.startswith("FAILED")]
    assert failed and all("toy-toy_kernels-silu_and_mul" in line for line in failed), failed


def conformance(plugin_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return run(plugin_path, "-m", "sglang.cli", "conformance", "--device", "toy", "--quiet", *args, **env)


def test_conformance_report_of_the_plugin(plugin_path: Path, tmp_path: Path) -> None:
    """`sglang conformance` on the plugin: a conformant verdict, and JSON and JUnit reports that
    carry the identity, capabilities, op table, every case and the verdict."""
    json_path, junit_path = tmp_path / "report.json", tmp_path / "report.xml"
    result = conformance(plugin_path, "--suite", "op_parity", "--json", str(json_path), "--junit", str(junit_path))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert result.stdout.splitlines()[-1] == "verdict: conformant"
    report = json.loads(json_path.read_text())
    assert report["verdict"] == "conformant"
    assert report["platform"]["name"] == "toy"
    assert report["platform"]["provided_by"] == "sglang-toy-device 0.1.0"
    assert report["capabilities"]["dtypes"] == ["bfloat16", "float32"]
    assert {r["op"]: r["family"] for r in report["op_table"]["ops"]}["rms_norm"] == "toy_kernels"
    (suite,) = report["suites"]
    assert suite["suite"] == "op_parity" and suite["passed_on_device"] > 0
    assert all(case["outcome"] in ("passed", "skipped") and case["seconds"] >= 0 for case in suite["cases"])
    assert any("toy-toy_kernels-rms_norm" in case["name"] for case in suite["cases"])
    testsuite = ET.parse(junit_path).getroot().find("testsuite")
    assert testsuite.get("name") == "op_parity"
    assert len(testsuite.findall("testcase")) == len(suite["cases"])
    properties = {p.get("name"): p.get("value") for p in testsuite.iter("property")}
    assert properties["verdict"] == "conformant" and properties["platform"] == "toy"


def test_conformance_of_a_broken_plugin_fails_naming_the_op_and_case(plugin_path: Path) -> None:
    result = conformance(
        plugin_path, "--suite", "op_parity", "--", "-k", "silu_and_mul", SGLANG_TOY_BROKEN_OP="silu_and_mul"
    )
    assert result.returncode == 1, result.stdout[-3000:]
    verdict = result.stdout.splitlines()[-1]
    assert verdict.startswith("verdict: not conformant: op_parity: test_op_parity[toy-toy_kernels-silu_and_mul-")


@pytest.mark.slow
def test_the_plugin_passes_the_mandatory_tier(plugin_path: Path) -> None:
    """Every suite (declarations, op parity, model parity, e2e on the embedded model) on the toy device."""
    result = conformance(plugin_path)
    assert result.returncode == 0, result.stdout[-5000:]
    assert result.stdout.splitlines()[-1] == "verdict: conformant"
