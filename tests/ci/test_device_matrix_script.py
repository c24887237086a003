"""ci/device_matrix.sh's exit status and its dry run's stopping point, without a GPU or Python.

Before issue 29 the script printed `op_parity FAIL (rc 1)` and exited 0. Here every step's
command is `false` (PYTHON=false), so every step before the device boundary fails: the dry run
must still stop there, call no device tool (`nvidia-smi` on PATH records a call), list each
failure in its summary and exit 1.
"""

from __future__ import annotations

import os
import pathlib
import subprocess

SCRIPT = pathlib.Path(__file__).parents[2] / "ci" / "device_matrix.sh"
STEPS_BEFORE_THE_DEVICE = ("pins", "install", "ops_cuda", "ops_qwen7b_config")


def test_failed_steps_fail_the_dry_run_before_any_device_call(tmp_path: pathlib.Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    called = tmp_path / "nvidia-smi-called"
    (bin_dir / "nvidia-smi").write_text(f"#!/bin/sh\ntouch {called}\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": "false", "OUT": str(out), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    result = subprocess.run(["bash", str(SCRIPT), "--dry-run"], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"{len(STEPS_BEFORE_THE_DEVICE)} step(s) failed" in result.stdout
    summary = (out / "summary.txt").read_text()
    for step in STEPS_BEFORE_THE_DEVICE:
        assert any(line.startswith(step) and "FAIL" in line for line in summary.splitlines()), (step, summary)
    assert "dry run: stopped before the first device call" in summary
    assert not called.exists(), "the dry run reached nvidia-smi"
