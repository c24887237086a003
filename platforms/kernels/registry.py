"""Finding kernel families: built-in ones by qualified name, out-of-tree ones by entry point.

A family module exposes `FAMILY`, a `KernelFamily` whose candidates all carry its name. The
module only declares: it must import on any machine, so kernels (and their vendor packages) are
imported only when a candidate is bound. Out-of-tree families register under the entry-point
group `sglang.kernel_families` (`name = "package.module:FAMILY"`); a built-in name cannot be
overridden.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from sglang.ops.binding import resolve
from sglang.ops.selection import Candidate
from sglang.platforms.entry_points import registered

ENTRY_POINT_GROUP = "sglang.kernel_families"

BUILTIN_FAMILIES: dict[str, str] = {
    "torch_native": "sglang.platforms.kernels.torch_native.family:FAMILY",
    "cpu_cpp": "sglang.platforms.kernels.cpu_cpp.family:FAMILY",
    "triton": "sglang.platforms.kernels.triton.family:FAMILY",
    "flashinfer": "sglang.platforms.kernels.flashinfer.family:FAMILY",
    "aiter": "sglang.platforms.kernels.aiter.family:FAMILY",
    "torch_npu": "sglang.platforms.kernels.torch_npu.family:FAMILY",
    "ipex": "sglang.platforms.kernels.ipex.family:FAMILY",
    "jax": "sglang.platforms.kernels.jax.family:FAMILY",
}


@dataclass(frozen=True)
class KernelFamily:
    name: str
    description: str
    candidates: tuple[Candidate, ...]
    probe: str | None = None
    """`package.module:function` returning why the family's kernels cannot run on this machine
    (a build that failed), or None when they can. It may build, so only a platform whose device
    this machine has runs it (`probe_failure`), and a family without one is never probed."""

    def __post_init__(self) -> None:
        strays = [c.qualname for c in self.candidates if c.family != self.name]
        if strays:
            raise ValueError(f"family {self.name!r} declares candidates of another family: {strays}")


@cache
def known_families() -> dict[str, str]:
    """Every family name and the qualified name of its `KernelFamily`."""
    return {**BUILTIN_FAMILIES, **registered(ENTRY_POINT_GROUP, BUILTIN_FAMILIES, "kernel family")}


@cache
def family(name: str) -> KernelFamily:
    known = known_families()
    if name not in known:
        raise KeyError(f"unknown kernel family {name!r} (known: {', '.join(known)})")
    declared = resolve(known[name])
    if not isinstance(declared, KernelFamily) or declared.name != name:
        raise TypeError(f"{known[name]} is not the KernelFamily named {name!r}")
    return declared


@cache
def probe_failure(name: str) -> str | None:
    """The family's probe result: None when it declares none or its kernels can run here."""
    probe = family(name).probe
    return None if probe is None else resolve(probe)()
