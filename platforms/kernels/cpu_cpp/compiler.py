"""Runs the C++ compiler for the family: torch's extension builder (ninja) in a child process,
with every core, its progress logged as it goes, and the compiler's own words on failure.

Why a child process: torch's builder imports what it built, and a process must not import a
second copy of the library (its ops would register twice), so the parent imports the published
one (see build.py).
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

logger = logging.getLogger(__name__)

LDFLAGS = ("-fopenmp",)
_BUILD_SCRIPT = """
import sys
import torch.utils.cpp_extension as builder
name, folder, flags, ldflags, *sources = sys.argv[1:]
builder.load(name=name, sources=sources, extra_cflags=flags.split(), extra_ldflags=ldflags.split(),
             build_directory=folder, is_python_module=True, verbose=True)
"""
# Ninja, writing to a pipe, prints `[done/total] command` as each compile or link step finishes.
_PROGRESS = re.compile(r"^\[(\d+)/(\d+)\]\s.*?(?:-o\s+(\S+))?\s*$")


class KernelBuildError(RuntimeError):
    """The compiler failed; the message is its reason (the first error line it printed)."""


def compiler() -> str:
    """The C++ compiler torch's builder runs: `$CXX`, else `c++`."""
    return os.environ.get("CXX", "c++")


def jobs() -> int:
    """Parallel compile steps: one per core this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def compile_into(folder: Path, name: str, sources: Sequence[Path], flags: Sequence[str]) -> None:
    """Builds `name` from `sources` into `folder`, logging each finished step; raises
    KernelBuildError with the compiler's reason when a step fails."""
    args = [name, str(folder), " ".join(flags), " ".join(LDFLAGS), *map(str, sources)]
    command = [sys.executable, "-c", _BUILD_SCRIPT, *args]
    env = {**os.environ, "MAX_JOBS": str(jobs())}
    started = time.perf_counter()
    output: list[str] = []
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env) as child:
        assert child.stdout is not None
        for line in child.stdout:
            output.append(line)
            step = _PROGRESS.match(line.strip())
            if step:
                done, total, target = step.groups()
                what = Path(target).name if target else "step"
                logger.info("building %s: [%s/%s] %s (%.0f s)", name, done, total, what, time.perf_counter() - started)
    if child.returncode != 0:
        raise KernelBuildError(f"{name} kernels failed to build with {compiler()}: {failure_reason(output)}")


def failure_reason(output: Sequence[str]) -> str:
    """The line that says why: the compiler's first error, else the first step ninja reports failed,
    else the last line written. Progress lines carry whole command lines, so they are skipped."""
    lines = [line.strip() for line in output if line.strip() and not _PROGRESS.match(line.strip())]
    for marker in ("error:", "not found", "FAILED:"):
        hits = [line for line in lines if marker in line]
        if hits:
            return hits[0][:300]
    return lines[-1][:300] if lines else "no output"
