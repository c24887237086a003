"""A non-editable install of the checkout, in a fresh venv, run from a folder outside the checkout.

This is what a new user (or a vendor's CI) gets from `pip install .`: pip builds a wheel from the
sources and installs it, so a module the wheel leaves out fails here, while the editable install
the Makefile uses would still import it from the checkout.

The fresh venv gets only the checkout's wheel. Its dependencies (torch and the rest, about 3 GB,
and the embedded model) come from the test's own venv through a `.pth` line, appended after the
fresh venv's site-packages: resolving and installing them is what `make setup` already does with
the same `pyproject.toml`, while what only this test shows is what the wheel itself carries.
The editable install's path line in that venv is not followed (a `.pth` line adds a folder
without reading the `.pth` files in it), so `sglang` can only come from the wheel;
`test_imports_come_from_the_installed_copy` checks that.

The fresh cache is seeded with the cpu C++ kernels built from the checkout. Their cache folder is
keyed by the bytes of every source and header (`cpu_cpp.build.build_folder`), so the installed
copy finds that build only if the wheel ships each of those files unchanged (a missing one fails
the key); compiling them again would add about a minute on two cores and test only the
compiler, which `make setup`'s `sglang build-kernels` and `tests/platforms` already run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from .layout import ROOT, mapped_folders, module_files

INSTALL_TIMEOUT_S = 900
COMMAND_TIMEOUT_S = 600
# What a source copy leaves behind: generated or local state, never sources.
NOT_SOURCES = (".git", ".venv", "__pycache__", "build", "dist", "*.egg-info", ".*_cache", ".hypothesis")


@dataclass(frozen=True)
class InstalledCommand:
    """An `sglang` command line run from the installed copy, and a string its stdout must contain."""

    args: tuple[str, ...]
    expect: str


# The commands the installed copy must run from outside the checkout: the main job, and the
# conformance suite a vendor runs (its suites ship inside the package).
INSTALLED_COMMANDS = [
    pytest.param(InstalledCommand(("generate", "--prompt", "What is the capital of France?"), "Paris"), id="generate"),
    pytest.param(
        InstalledCommand(("conformance", "--device", "cpu", "--suite", "op_parity", "--quiet"), "verdict: conformant"),
        id="conformance",
    ),
]


@dataclass
class Installed:
    venv: Path
    source: Path  # the copy of the checkout that was installed
    site_packages: Path
    workdir: Path  # outside the checkout; every command runs here
    env: dict[str, str]
    timings: dict[str, float]

    def bin(self, name: str) -> Path:
        return self.venv / "bin" / name


def run(cmd: list[str], *, cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, (
        f"{' '.join(map(str, cmd))} exited {proc.returncode}\n"
        f"--- stdout (tail)\n{proc.stdout[-4000:]}\n--- stderr (tail)\n{proc.stderr[-4000:]}"
    )
    return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Iterator[Installed]:
    base = tmp_path_factory.mktemp("installed")
    assert not base.resolve().is_relative_to(ROOT), f"the install must happen outside the checkout, not in {base}"
    workdir = base / "work"
    workdir.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    venv = base / "venv"
    env.update(
        PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        VIRTUAL_ENV=str(venv),
        PIP_NO_INPUT="1",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        SGLANG_CACHE_DIR=str(base / "cache"),  # the GGUF conversion lands here, not in the user's home
    )
    timings: dict[str, float] = {}

    def step(name: str, cmd: list[str]) -> None:
        start = time.monotonic()
        run(cmd, cwd=workdir, env=env, timeout=INSTALL_TIMEOUT_S)
        timings[name] = time.monotonic() - start

    # A copy, so that pip's in-tree build writes its build/ and egg-info there and not into the
    # checkout (which an editable install and concurrent runs share); the copy is also the
    # snapshot the installed tree is compared with.
    start = time.monotonic()
    source = base / "source"
    # Links stay links (`sglang/runtime` -> `../runtime`), as in a clone.
    shutil.copytree(ROOT, source, symlinks=True, ignore=shutil.ignore_patterns(*NOT_SOURCES))
    timings["copy"] = time.monotonic() - start

    # No pip of its own: the test venv's pip installs into it (`--python`), which saves ensurepip.
    step("venv", [sys.executable, "-m", "venv", "--without-pip", str(venv)])
    purelib = run(
        [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        cwd=workdir,
        env=env,
        timeout=COMMAND_TIMEOUT_S,
    ).stdout.strip()
    (Path(purelib) / "_dependencies_of_the_test_venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--quiet", "--no-deps"]
    step("checkout", [*pip, str(source)])
    seed_cpu_kernels(base / "cache")
    print("install timings (s):", {k: round(v, 1) for k, v in timings.items()})
    yield Installed(venv, source, Path(purelib), workdir, env, timings)
    # About 3 GB of small files (mostly torch and triton): deleting them can take minutes on a busy
    # disk, so a detached `rm` does it and the run does not wait.
    subprocess.run(["sh", "-c", 'rm -rf "$0" &', str(base)], check=False)


def seed_cpu_kernels(cache: Path) -> None:
    """Copies the checkout's cpu C++ kernel build into `cache` under its key (see the module
    docstring); nothing when this machine cannot build them (the installed copy then reports
    the compiler's reason and serves with the next family, as in the checkout)."""
    from sglang.platforms.kernels.cpu_cpp import build

    if build.build_failure() is not None:
        return
    folder = build.build_folder(build.compile_flags())
    shutil.copytree(folder, cache / "torch_extensions" / folder.name)


def test_every_module_ships(installed: Installed):
    """Each .py file under the folders setup.py maps is in the installed `sglang` tree, at its mapped place."""
    missing = []
    for folder, package_root in mapped_folders().items():
        target = installed.site_packages.joinpath(*package_root.split("."))
        for relative in module_files(folder, root=installed.source):
            if not (target / relative).is_file():
                missing.append(f"{folder}/{relative.as_posix()}")
    assert not missing, f"modules missing from the installed package: {missing}"


def test_imports_come_from_the_installed_copy(installed: Installed):
    code = "import sglang, sglang.cli, sglang.runtime.scheduler.process as p; print(sglang.__file__); print(p.__file__)"
    out = run([str(installed.bin("python")), "-c", code], cwd=installed.workdir, env=installed.env, timeout=120)
    for line in out.stdout.split():
        assert Path(line).resolve().is_relative_to(installed.site_packages.resolve()), (
            f"{line} is not the installed copy"
        )


@pytest.mark.parametrize("command", INSTALLED_COMMANDS)
def test_installed_command(installed: Installed, command: InstalledCommand):
    start = time.monotonic()
    out = run(
        [str(installed.bin("sglang")), *command.args],
        cwd=installed.workdir,
        env=installed.env,
        timeout=COMMAND_TIMEOUT_S,
    )
    print(f"sglang {command.args[0]}: {time.monotonic() - start:.1f} s")
    assert command.expect in out.stdout, f"`sglang {' '.join(command.args)}` printed {out.stdout!r}"
