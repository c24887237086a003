"""Conformance results: cases read from pytest's JUnit XML, a suite's outcome, a device's report.

A case counts for a device only when its test parameters name that device (`test_x[cpu-...]`):
a test that is not parametrized by device says nothing about the device. A case skipped for a
declared capability (a dtype or page size the platform does not declare, a requirement a kernel
candidate declares) is capability-gated; every other case is in the mandatory tier. A report is
`conformant` when no case failed and every requested suite passed at least one case on the device.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


def names_device(test_name: str, device: str) -> bool:
    """Whether `test_x[cpu-rms_norm-fp32]`'s parameter ids include `device` as a whole id."""
    _, bracket, params = test_name.partition("[")
    return bool(bracket) and device in params.rstrip("]").split("-")


@dataclass(frozen=True)
class CaseResult:
    name: str
    """The test id, parameters included (`test_op_parity[cpu-torch_native-rms_norm-3x64-torch.float32]`)."""
    outcome: str
    """`passed`, `failed`, `error` or `skipped`."""
    seconds: float
    message: str = ""
    """The skip reason or the first line of the failure."""

    @property
    def failed(self) -> bool:
        return self.outcome in ("failed", "error")


def read_junit(junit_xml: str) -> list[CaseResult]:
    cases = []
    for case in ET.fromstring(junit_xml).iter("testcase"):
        children = {child.tag: child for child in case}
        outcome = next((tag for tag in ("failure", "error", "skipped") if tag in children), None)
        message = children[outcome].get("message", "") if outcome else ""
        cases.append(
            CaseResult(
                name=case.get("name", ""),
                outcome={"failure": "failed", None: "passed"}.get(outcome, outcome),
                seconds=float(case.get("time", 0.0)),
                message=message.removeprefix("Skipped: ").splitlines()[0] if message else "",
            )
        )
    return cases


@dataclass(frozen=True)
class SuiteResult:
    suite: str
    device: str
    cases: tuple[CaseResult, ...]
    seconds: float
    returncode: int
    problem: str = ""
    """Why the suite could not be judged by its cases (pytest crashed, timed out, wrote no report)."""

    def on_device(self) -> list[CaseResult]:
        return [c for c in self.cases if names_device(c.name, self.device)]

    @property
    def passed(self) -> int:
        return sum(c.outcome == "passed" for c in self.on_device())

    @property
    def failures(self) -> list[CaseResult]:
        return [c for c in self.cases if c.failed]

    def skip_reasons(self) -> Counter:
        return Counter(c.message for c in self.cases if c.outcome == "skipped")

    @property
    def agnostic_passed(self) -> int:
        return sum(c.outcome == "passed" and not names_device(c.name, self.device) for c in self.cases)

    @property
    def ok(self) -> bool:
        return not self.problem and not self.failures and self.passed > 0


@dataclass
class ConformanceReport:
    platform: dict[str, Any]
    """Identity: name, device type, the distribution and version that provide it, availability."""
    capabilities: dict[str, Any]
    op_table: dict[str, Any]
    label: str = ""
    """What the run really exercised when that is not the device itself (an interpreter, XLA:CPU)."""
    suites: list[SuiteResult] = field(default_factory=list)

    def verdict(self) -> str:
        """`conformant`, or what fails the mandatory tier, by suite and case."""
        problems = []
        for suite in self.suites:
            if suite.problem:
                problems.append(f"{suite.suite}: {suite.problem}")
            problems += [f"{suite.suite}: {case.name}" for case in suite.failures]
            if not suite.problem and not suite.failures and suite.passed == 0:
                problems.append(f"{suite.suite}: no case ran on {suite.device}")
        return "conformant" if not problems else "not conformant: " + "; ".join(problems)

    def as_dict(self) -> dict[str, Any]:
        return {
            "platform": self.platform,
            "label": self.label,
            "capabilities": self.capabilities,
            "op_table": self.op_table,
            "verdict": self.verdict(),
            "suites": [self._suite_dict(s) for s in self.suites],
        }

    @staticmethod
    def _suite_dict(suite: SuiteResult) -> dict[str, Any]:
        summary = {k: v for k, v in asdict(suite).items() if k != "cases"}
        return {
            **summary,
            "passed_on_device": suite.passed,
            "skip_reasons": dict(suite.skip_reasons()),
            "cases": [asdict(c) for c in suite.cases],
        }

    def write_json(self, path: Path) -> None:
        path.write_text(json.dumps(self.as_dict(), indent=2))

    def write_junit(self, path: Path) -> None:
        """One testsuite per suite, the verdict and identity as properties, so CI systems show it."""
        root = ET.Element("testsuites", name=f"sglang conformance: {self.platform['name']}")
        for suite in self.suites:
            node = ET.SubElement(
                root,
                "testsuite",
                name=suite.suite,
                tests=str(len(suite.cases)),
                failures=str(len(suite.failures)),
                time=f"{suite.seconds:.3f}",
                skipped=str(sum(c.outcome == "skipped" for c in suite.cases)),
            )
            properties = ET.SubElement(node, "properties")
            for key, value in (("platform", self.platform["name"]), ("label", self.label), ("verdict", self.verdict())):
                ET.SubElement(properties, "property", name=key, value=value)
            for case in suite.cases:
                element = ET.SubElement(
                    node, "testcase", classname=suite.suite, name=case.name, time=f"{case.seconds:.3f}"
                )
                if case.failed:
                    ET.SubElement(element, "failure", message=case.message)
                elif case.outcome == "skipped":
                    ET.SubElement(element, "skipped", message=case.message)
        ET.ElementTree(root).write(path, encoding="unicode", xml_declaration=True)

    def render(self) -> str:
        """The human summary `sglang conformance` prints."""
        lines = [f"platform: {self.platform['name']} ({self.platform.get('provided_by', '?')})"]
        if self.label:
            lines.append(f"ran on: {self.label}")
        for suite in self.suites:
            skipped = sum(c.outcome == "skipped" for c in suite.cases)
            lines.append(
                f"  {suite.suite}: {suite.passed} passed on {suite.device}, {len(suite.failures)} failed, "
                f"{skipped} skipped, {suite.seconds:.1f} s" + (f" ({suite.problem})" if suite.problem else "")
            )
            lines += [f"    FAILED {case.name}: {case.message}" for case in suite.failures]
            lines += [f"    skipped x{n}: {reason}" for reason, n in suite.skip_reasons().most_common()]
        lines.append(f"verdict: {self.verdict()}")
        return "\n".join(lines)
