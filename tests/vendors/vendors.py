"""The stand-in of each vendor family: how to build it and which cases reach the vendor."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sglang.ops.selection import Candidate

from . import flashinfer_standin


def _always(candidate: Candidate, case, args) -> bool:
    return True


def _sampling_may_fall_back(candidate: Candidate, case, args) -> bool:
    """Sampling adapters take the reference for rows the vendor cannot serve (seeds, min-p)."""
    return candidate.op == "sample"


@dataclass(frozen=True)
class VendorSpec:
    build: Callable
    package: str
    """Our adapter package, re-imported against the stand-in."""
    serves: Callable = _always
    may_skip_vendor: Callable = _sampling_may_fall_back


VENDORS: dict[str, VendorSpec] = {
    "flashinfer": VendorSpec(flashinfer_standin.build, "sglang.platforms.kernels.flashinfer"),
}
