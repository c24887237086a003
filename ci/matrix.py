"""The conformance matrix: every target x every suite, run where possible, reported honestly.

    python -m sglang.ci.matrix                  # every known device and extra target, every suite
    python -m sglang.ci.matrix --devices cpu,cuda --suites op_parity
    python -m sglang.ci.matrix --devices triton-interpreter     # the Triton family in its interpreter
    python -m sglang.ci.matrix --list           # the matrix and the pytest command of each cell
    python -m sglang.ci.matrix --json out.json -- -x   # also write results; args after -- go to pytest

A row is a target: a known device, or an extra target that runs one kernel family somewhere it
is not at home and says so (the Triton family in Triton's interpreter on cpu tensors is labelled
as that, never as a GPU). Each cell is one pytest run with `SGLANG_TEST_DEVICE=<device>` (plus
the target's environment), which narrows the suite's device parametrization
(`sglang.ci.suites.devices`) to that device. A cell reads:

- `pass`: tests parametrized with this device passed and none failed;
- `FAIL`: a test failed or errored, or pytest itself failed;
- `skipped`: nothing ran on the device; the skip reasons (declared capabilities) are listed;
- `not run here`: the device is unavailable on this machine (its reason is shown); a suite
  that needs no device (`static`) still runs;
- `no tests`: nothing was collected, or only tests that are not parametrized by device ran
  (those never count as testing the device);
- `n/a`: the suite does not apply to the target.

The exit status is 1 when any cell failed, else 0.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from sglang.ci.report import SuiteResult
from sglang.ci.runner import DEVICE_ENV, SUITES, Suite, pytest_command, run_suite


@dataclass(frozen=True)
class Target:
    """One row of the matrix."""

    name: str
    device: str
    """The platform the tests are parametrized by (`SGLANG_TEST_DEVICE`)."""
    env: tuple[tuple[str, str], ...] = ()
    label: str = ""
    """What the row really ran on, when that is not the device itself."""
    suites: tuple[str, ...] | None = None
    """The suites that apply (None: every suite)."""
    requires: tuple[str, ...] = ()
    """Packages the target needs on this machine."""

    def applies(self, suite: Suite) -> bool:
        return self.suites is None or suite.name in self.suites


EXTRA_TARGETS: tuple[Target, ...] = (
    Target(
        "triton-interpreter",
        device="cpu",
        env=(("TRITON_INTERPRET", "1"), ("SGLANG_TEST_FAMILIES", "triton")),
        label="Triton family in Triton's interpreter on cpu tensors (not a GPU)",
        suites=("op_parity", "model_parity"),
        requires=("triton",),
    ),
    Target(
        "tpu-xla-cpu",
        device="tpu",
        env=(("JAX_PLATFORMS", "cpu"),),
        label="tpu platform on XLA:CPU (JAX's CPU backend, not a TPU)",
        requires=("jax", "torchax"),
    ),
)


@dataclass(frozen=True)
class Outcome:
    status: str
    detail: str = ""

    @property
    def failed(self) -> bool:
        return self.status == "FAIL"

    def cell(self) -> str:
        return f"{self.status} ({self.detail})" if self.detail else self.status


def judge(result: SuiteResult) -> Outcome:
    """A cell from a suite's result, from the point of view of the device it ran for."""
    if result.problem:
        return Outcome("FAIL", result.problem)
    skip_reasons = result.skip_reasons()
    skipped = sum(skip_reasons.values())
    if result.failures:
        return Outcome("FAIL", f"{len(result.failures)} failed, {result.passed} passed")
    if result.passed:
        return Outcome("pass", f"{result.passed} passed" + (f", {skipped} skipped" if skipped else ""))
    if skipped:
        return Outcome("skipped", "; ".join(sorted(skip_reasons)))
    if result.agnostic_passed:
        return Outcome("no tests", f"only {result.agnostic_passed} tests not parametrized by device")
    return Outcome("no tests", "nothing collected")


def run_cell(target: Target, suite: Suite, extra: Sequence[str], timeout: float, echo: bool = False) -> Outcome:
    return judge(run_suite(target.device, suite, dict(target.env), extra, timeout, echo=echo))


def known_targets() -> dict[str, Target]:
    """Every known device as its own target, then the extra targets."""
    from sglang.platforms.registry import known_platforms

    return {**{name: Target(name, device=name) for name in known_platforms()}, **{t.name: t for t in EXTRA_TARGETS}}


AVAILABILITY_PROBE = (
    "import json, sys; from sglang.platforms.registry import platform_class; "
    "s = platform_class(sys.argv[1]).availability(); print(json.dumps([s.available, s.reason]))"
)


def availability_under(target: Target) -> tuple[bool, str]:
    """The device's availability as the target's environment sees it (a child process: a
    platform may read its environment once, at import)."""
    environment = {**os.environ, **dict(target.env)}
    probe = subprocess.run(
        [sys.executable, "-c", AVAILABILITY_PROBE, target.device],
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if probe.returncode != 0:
        return False, f"availability check failed: {probe.stderr.strip().splitlines()[-1:]}"
    available, reason = json.loads(probe.stdout.strip().splitlines()[-1])
    return bool(available), reason


def target_availability(targets: Sequence[Target]) -> dict[str, tuple[bool, str]]:
    from sglang.platforms.registry import platform_class

    states = {}
    for target in targets:
        missing = [p for p in target.requires if importlib.util.find_spec(p) is None]
        if missing:
            states[target.name] = (False, f"{', '.join(missing)} not installed")
        elif target.env:
            states[target.name] = availability_under(target)
        else:
            state = platform_class(target.device).availability()
            states[target.name] = (state.available, state.reason)
    return states


def run_matrix(
    targets: Sequence[Target],
    suites: Sequence[Suite],
    availability: dict[str, tuple[bool, str]],
    run: Callable[[Target, Suite], Outcome],
) -> dict[tuple[str, str], Outcome]:
    """Runs each cell the machine can run; the others are `not run here` with the reason, or
    `n/a` where the suite does not apply to the target."""
    results = {}
    for target in targets:
        available, reason = availability[target.name]
        for suite in suites:
            if not target.applies(suite):
                results[target.name, suite.name] = Outcome("n/a")
            elif suite.needs_device and not available:
                results[target.name, suite.name] = Outcome("not run here", reason)
            else:
                print(f"[matrix] {target.name} x {suite.name} ...", file=sys.stderr, flush=True)
                results[target.name, suite.name] = run(target, suite)
    return results


def render(targets: Sequence[Target], suites: Sequence[Suite], results: dict[tuple[str, str], Outcome]) -> str:
    header = ["target", *(s.name for s in suites)]
    rows = [[t.name, *(results[t.name, s.name].cell() for s in suites)] for t in targets]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [" | ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [header, *rows]]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    lines += [f"{t.name}: {t.label}" for t in targets if t.label]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", help="comma-separated targets; default: every known platform and extra target")
    parser.add_argument("--suites", help=f"comma-separated from {', '.join(s.name for s in SUITES)}")
    parser.add_argument("--list", action="store_true", help="print the matrix and commands, run nothing")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per cell")
    parser.add_argument("--echo", action="store_true", help="stream each cell's pytest output to stderr")
    args = parser.parse_args(argv)

    known = known_targets()
    names = args.devices.split(",") if args.devices else list(known)
    by_name = {s.name: s for s in SUITES}
    suites = [by_name[n] for n in args.suites.split(",")] if args.suites else list(SUITES)
    unknown = [d for d in names if d not in known]
    if unknown:
        parser.error(f"unknown target(s) {', '.join(unknown)} (known: {', '.join(known)})")
    targets = [known[name] for name in names]
    if args.list:
        for suite in suites:
            command = " ".join(pytest_command(suite, None, extra))
            print(f"{suite.name}: {suite.description}\n    {DEVICE_ENV}=<device> {command}")
        for target in EXTRA_TARGETS:
            env = " ".join(f"{k}={v}" for k, v in target.env)
            print(f"{target.name}: {target.label}\n    {DEVICE_ENV}={target.device} {env} (suites: {target.suites})")
        return 0

    availability = target_availability(targets)
    results = run_matrix(targets, suites, availability, lambda t, s: run_cell(t, s, extra, args.timeout, args.echo))
    print(render(targets, suites, results))
    if args.json:
        labels = {t.name: t.label for t in targets}
        cells = [{"target": t, "label": labels[t], "suite": s, **asdict(o)} for (t, s), o in results.items()]
        args.json.write_text(json.dumps(cells, indent=2))
    return int(any(o.failed for o in results.values()))


if __name__ == "__main__":
    sys.exit(main())
