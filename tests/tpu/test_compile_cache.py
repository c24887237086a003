"""JAX's persistent compilation cache: a second start compiles nothing new."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def _start(cache: Path, models: Path) -> dict:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "SGLANG_JAX_CACHE_DIR": str(cache)}
    result = subprocess.run(
        [sys.executable, "-m", "tests.tpu.compile_cache_child", str(models)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_second_start_finds_every_step_in_the_cache(tmp_path: Path) -> None:
    cache = tmp_path / "jax-cache"
    first = _start(cache, tmp_path / "models")
    entries = sorted(p.name for p in cache.iterdir())
    assert entries, "the first start wrote nothing to the compilation cache"
    second = _start(cache, tmp_path / "models")
    assert second["shape"] == first["shape"]
    assert sorted(p.name for p in cache.iterdir()) == entries, "the second start compiled the step again"
