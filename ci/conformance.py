"""`sglang conformance`: the conformance suites against one installed platform, and its report.

    sglang conformance --device cpu                           # every suite
    sglang conformance --device mydev --suite op_parity --json report.json --junit report.xml

Runs from an installed package (the suites ship in `sglang.ci.suites`), for in-tree and
out-of-tree platforms alike, and exits 0 only when the verdict is `conformant`. The report
carries the platform's identity and version, its declared capabilities, the op table it binds
(as `sglang ops` prints it), every case with its result and time, and a one-line verdict. A run
that did not exercise the device it names says so in `label` (Triton's interpreter, XLA:CPU).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sglang.ci.report import ConformanceReport
from sglang.ci.runner import SUITES, SUITES_BY_NAME, run_suite
from sglang.platforms.base import ModelFacts, Platform
from sglang.platforms.registry import known_platforms, platform_class

INTERPRETER_LABEL = "Triton kernels in Triton's interpreter on host tensors (not a GPU)"


def provided_by(cls: type) -> str:
    """`distribution version` of the package that ships `cls`."""
    top = cls.__module__.split(".")[0]
    names = importlib.metadata.packages_distributions().get(top, [])
    if not names:
        return "not installed as a distribution"
    return f"{names[0]} {importlib.metadata.version(names[0])}"


def identity(platform: Platform) -> dict[str, Any]:
    cls = type(platform)
    state = cls.availability()
    return {
        "name": cls.name,
        "description": platform.describe(),
        "device_type": cls.device_type,
        "class": f"{cls.__module__}:{cls.__qualname__}",
        "provided_by": provided_by(cls),
        "available": state.available,
        "unavailable_reason": state.reason,
        "kernel_families": list(platform.kernel_families),
        "distributed_backend": cls.distributed_backend,
    }


def capabilities(platform: Platform) -> dict[str, Any]:
    def plain(value: Any) -> Any:
        if isinstance(value, (frozenset, set, tuple, list)):
            return sorted(plain(v) for v in value)
        return str(value).removeprefix("torch.") if not isinstance(value, (bool, int, float, type(None))) else value

    return {f.name: plain(getattr(platform.capabilities, f.name)) for f in dataclasses.fields(platform.capabilities)}


def run_label() -> str:
    return INTERPRETER_LABEL if os.environ.get("TRITON_INTERPRET") == "1" else ""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sglang conformance", description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", required=True, help=f"platform to check (known: {', '.join(known_platforms())})")
    parser.add_argument(
        "--suite",
        action="append",
        choices=[s.name for s in SUITES],
        help="a suite to run (repeat for several); default: every suite",
    )
    parser.add_argument("--json", type=Path, help="write the report as JSON here")
    parser.add_argument("--junit", type=Path, help="write the report as JUnit XML here")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per suite")
    parser.add_argument("--quiet", action="store_true", help="do not stream pytest's output")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    args = build_parser().parse_args(argv)
    if importlib.util.find_spec("pytest") is None:
        print("sglang conformance: the suites run under pytest: pip install 'sglang-hal[conformance]'", file=sys.stderr)
        return 2
    platform = platform_class(args.device)()
    table = platform.select_ops(ModelFacts(dtype=platform.capabilities.default_dtype))
    report = ConformanceReport(identity(platform), capabilities(platform), table.as_dict(), label=run_label())
    for name in args.suite or [s.name for s in SUITES]:
        report.suites.append(
            run_suite(args.device, SUITES_BY_NAME[name], extra=extra, timeout=args.timeout, echo=not args.quiet)
        )
    print(report.render())
    if args.json:
        report.write_json(args.json)
    if args.junit:
        report.write_junit(args.junit)
    return 0 if report.verdict() == "conformant" else 1


if __name__ == "__main__":
    sys.exit(main())
