"""Virtual environments for third-party clients of our server, built once and cached.

Upstream SGLang's frontend is a package named `sglang`, like ours, so it can never share an
environment with this project; SGLang's routers (`smg`, `sglang-router`) both install a script
named `smg`, so they cannot share one with each other either. Each gets its own venv, made with
this interpreter's `venv` module and filled by pip from the package index.

A venv lives under `$SGLANG_TEST_VENV_CACHE` (default `~/.cache/sglang-test-venvs`) in a folder
named after a hash of everything that decides its contents (the pinned requirements, the Python
version, the platform, `BUILD_RECIPE`), so a changed pin builds a new one and an unchanged one is
reused across sessions and checkouts. A file lock serializes builders of the same venv, and a
marker file written last tells a complete venv from one whose build was interrupted (which is
wiped and rebuilt).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

BUILD_RECIPE = 1
"""Bump when the way a venv is built changes (flags, steps), so cached ones are rebuilt."""
BUILD_TIMEOUT_S = float(os.environ.get("SGLANG_TEST_VENV_TIMEOUT") or 1200)
COMPLETE_MARKER = ".sglang-test-venv-complete"


@dataclass(frozen=True)
class VenvSpec:
    """What one venv holds: `requirements` installed with their dependencies, then `no_deps`
    installed without theirs (upstream SGLang's frontend: its full dependency set is the serving
    runtime, which a client does not import)."""

    name: str
    requirements: tuple[str, ...]
    no_deps: tuple[str, ...] = ()
    check_import: str = ""
    """A statement run by the new venv's python before it is marked complete."""

    def key(self) -> str:
        identity = {
            "name": self.name,
            "requirements": sorted(self.requirements),
            "no_deps": sorted(self.no_deps),
            "check_import": self.check_import,
            "python": platform.python_version(),
            "platform": f"{sys.platform}-{platform.machine()}",
            "recipe": BUILD_RECIPE,
        }
        return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


@dataclass
class Venv:
    spec: VenvSpec
    path: Path
    built: bool
    """True when this call built it, False when it came from the cache."""
    seconds: float
    """Time this call spent: the build, or only the lock and the marker check."""
    steps: dict[str, float] = field(default_factory=dict)

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    def script(self, name: str) -> Path:
        return self.path / "bin" / name


def cache_root() -> Path:
    configured = os.environ.get("SGLANG_TEST_VENV_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "sglang-test-venvs"


def ensure_venv(spec: VenvSpec, root: Path | None = None) -> Venv:
    """The venv of `spec`, from the cache or built now; raises with pip's output on failure."""
    root = root or cache_root()
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"{spec.name}-{spec.key()}"
    started = time.monotonic()
    with open(root / f"{path.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if (path / COMPLETE_MARKER).exists():
                return Venv(spec, path, built=False, seconds=time.monotonic() - started)
            steps = _build(spec, path)
            return Venv(spec, path, built=True, seconds=time.monotonic() - started, steps=steps)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _build(spec: VenvSpec, path: Path) -> dict[str, float]:
    shutil.rmtree(path, ignore_errors=True)  # what an interrupted build left
    steps: dict[str, float] = {}
    python = str(path / "bin" / "python")
    # Quiet pip that never prompts, and writes no bytecode up front: compiling the whole of
    # torch costs more than the few modules a client imports compile on first use.
    pip = [
        python,
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "--no-input",
        "--progress-bar",
        "off",
        "--no-compile",
        "-q",
    ]
    commands: list[tuple[str, list[str]]] = [("venv", [sys.executable, "-m", "venv", str(path)])]
    if spec.requirements:
        commands.append(("requirements", [*pip, *spec.requirements]))
    if spec.no_deps:
        commands.append(("no_deps", [*pip, "--no-deps", *spec.no_deps]))
    if spec.check_import:
        commands.append(("check", [python, "-c", spec.check_import]))
    for step, command in commands:
        t0 = time.monotonic()
        # Outside any checkout, so a folder named like a package in the cwd shadows nothing.
        result = subprocess.run(command, cwd=path.parent, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
        steps[step] = time.monotonic() - t0
        if result.returncode != 0:
            raise RuntimeError(
                f"building venv {path.name}: step {step!r} failed ({result.returncode}):\n"
                f"$ {' '.join(command)}\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
            )
    (path / COMPLETE_MARKER).write_text(json.dumps({"spec": spec.name, "steps": steps}, indent=1))
    return steps


# ---- the venvs of this test package ------------------------------------------------------------

UPSTREAM_SGLANG_VERSION = "0.5.23"

UPSTREAM_FRONTEND = VenvSpec(
    name="upstream-sglang",
    requirements=(
        # The frontend imports torch and triton when the package is imported (its HTTP path never
        # calls them). `+cpu` is the CPU build, which lies on these machines' disk: without the
        # local label pip would fetch a CUDA build and its gigabytes of libraries.
        "torch==2.13.0+cpu",
        "triton==3.9.0",
        # What the frontend and the modules its package import pull in.
        "numpy==2.4.6",
        "orjson==3.13.0",
        "psutil==7.2.2",
        "pybase64==1.5.1",
        "requests==2.34.2",
        "packaging==26.4",
        "pillow==13.0.0",
        "starlette==1.10.0",
        "msgspec==0.23.0",
        "pydantic==2.14.4",
        "pyzmq==27.3.0",
        "tqdm==4.70.1",
        "ipython==9.18.1",
        "aiohttp==3.14.5",
    ),
    # Its declared dependencies are the whole serving runtime (flashinfer, sgl-kernel, ...).
    no_deps=(f"sglang=={UPSTREAM_SGLANG_VERSION}",),
    check_import="import sglang, sglang.lang.backend.runtime_endpoint",
)

SMG = VenvSpec(name="smg", requirements=("smg==1.13.0",), check_import="import smg.cli")
SGLANG_ROUTER = VenvSpec(
    name="sglang-router", requirements=("sglang-router==0.3.2",), check_import="import sglang_router.cli"
)

ANTHROPIC_CLIENT = VenvSpec(
    name="anthropic-client", requirements=("anthropic==2.15.0",), check_import="import anthropic"
)
OLLAMA_CLIENT = VenvSpec(name="ollama-client", requirements=("ollama==0.6.3",), check_import="import ollama")
LITELLM = VenvSpec(
    name="litellm",
    # litellm, and what our frontend imports besides what litellm brings (httpx, jinja2, click):
    # `sgl.LiteLLM` runs in this venv with the checkout on PYTHONPATH, and the frontend never
    # imports torch.
    requirements=("litellm==1.110.2", "rich", "tqdm"),
    check_import="import litellm",
)
