"""Choosing one implementation per op from candidates, by eligibility, once at startup.

A candidate is one kernel family's implementation of one op, with the requirements it needs met
(dtypes, head dims, page sizes, GQA ratios, weight formats, importable packages, a minimum device
capability, device architectures). Selection walks a platform's families in preference order,
and each family's candidates for the op by descending priority; the first eligible candidate
wins, and every other candidate is recorded with the reason it lost. The op's reference is
always the last candidate and always eligible, so every op gets an implementation.

Nothing here names a device: the facts a requirement is checked against arrive as a
`SelectionContext`, which the platform builds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import torch

from sglang.ops.binding import REFERENCE_OPS

REFERENCE_FAMILY = "reference"

FEATURE_OPS: dict[str, str] = {"sinks": "attention_backend", "expert_bias": "moe_experts"}
"""Model features only some candidates of an op serve, and the op each concerns: attention sinks
(a per-head logit every query also attends to, gpt-oss), experts with biases and the clamped
SwiGLU (gpt-oss). A candidate of that op serves a feature only where it lists it in
`Requirements.features`; the reference serves every one."""


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _listed(values: frozenset) -> str:
    return ", ".join(sorted(_dtype_name(v) if isinstance(v, torch.dtype) else str(v) for v in values))


@dataclass(frozen=True)
class Requirements:
    """What a candidate needs; None means "any"."""

    dtypes: frozenset[torch.dtype] | None = None
    head_dims: frozenset[int] | None = None
    page_sizes: frozenset[int] | None = None
    gqa_ratios: frozenset[int] | None = None
    weight_formats: frozenset[str] | None = None
    packages: tuple[str, ...] = ()
    """Import names (`triton`, `flashinfer`); a dotted name (`triton.backends.intel`) checks a submodule."""
    min_capability: tuple[int, int] | None = None
    device_archs: frozenset[str] | None = None
    """Device architectures the vendor ships kernels for (AMD's `gfx942`), where a capability
    order says nothing: a later architecture need not run an earlier one's assembly."""
    features: frozenset[str] = frozenset()
    """The `FEATURE_OPS` features of its op this candidate serves (`sinks`): a model that needs
    one it does not list is refused, with the reason, as for an unserved dtype."""
    unavailable: str | None = None
    """Why the candidate cannot run on this machine whatever the model (its kernels failed to
    build); set by a platform that probed its family, checked before everything else."""

    def merged(self, other: Requirements) -> Requirements:
        """Both sets of requirements at once (a platform adds its own to a family's)."""

        def meet(a: frozenset | None, b: frozenset | None) -> frozenset | None:
            return b if a is None else a if b is None else a & b

        caps = [c for c in (self.min_capability, other.min_capability) if c is not None]
        return Requirements(
            dtypes=meet(self.dtypes, other.dtypes),
            head_dims=meet(self.head_dims, other.head_dims),
            page_sizes=meet(self.page_sizes, other.page_sizes),
            gqa_ratios=meet(self.gqa_ratios, other.gqa_ratios),
            weight_formats=meet(self.weight_formats, other.weight_formats),
            packages=tuple(dict.fromkeys((*self.packages, *other.packages))),
            min_capability=max(caps) if caps else None,
            device_archs=meet(self.device_archs, other.device_archs),
            features=self.features | other.features,
            unavailable=self.unavailable or other.unavailable,
        )


@dataclass(frozen=True)
class Candidate:
    op: str
    family: str
    qualname: str
    """`package.module:attribute`, imported only when this candidate is bound or tested."""
    requires: Requirements = field(default_factory=Requirements)
    priority: int = 0
    """Higher is tried first among one family's candidates for the same op."""
    tunable: bool = False
    """The implementation takes a keyword `tuning` (block sizes, warps): the platform's tuning
    for this family is bound to it, so kernels never read tuning from globals."""
    path: Callable[[SelectionContext], str | None] | None = None
    """Which of its own code paths the implementation takes for a model (flashinfer: decode on
    tensor cores or CUDA cores, by GQA group), for `sglang ops` to say. It must import on any
    machine: it decides from the context alone, as the implementation does at run time."""


@dataclass(frozen=True)
class SelectionContext:
    """The facts requirements are checked against. A None fact (no model given) is not checked."""

    dtype: torch.dtype
    head_dim: int | None = None
    gqa_ratio: int | None = None
    page_size: int | None = None
    weight_format: str = "dense"
    """Every format the model's weights come in, comma-separated (`dense,int4_g32,int8_g32`). A
    candidate must serve each quantized one listed; every `linear` candidate serves dense weights,
    so `dense` is checked only for a model with no quantized weights (a candidate that declares
    only quantized formats is not bound for a dense model)."""
    device_capability: tuple[int, int] | None = None
    device_arch: str | None = None
    """The device's architecture name (`gfx942`), where kernels are built per architecture."""
    features: frozenset[str] = frozenset()
    """The `FEATURE_OPS` features the model needs (`sinks`); checked only on the op each concerns."""
    package_present: Callable[[str], bool] = lambda name: True


def ineligibility(candidate: Candidate, ctx: SelectionContext) -> str | None:
    """Why `candidate` cannot serve under `ctx`, or None when it can."""
    req = candidate.requires
    if req.unavailable:
        return req.unavailable
    checks: list[tuple[object, frozenset | None, str]] = [
        (ctx.dtype, req.dtypes, "dtype"),
        (ctx.head_dim, req.head_dims, "head dim"),
        (ctx.gqa_ratio, req.gqa_ratios, "GQA ratio"),
        (ctx.page_size, req.page_sizes, "page size"),
        (ctx.weight_format, req.weight_formats, "weight format"),
        (ctx.device_arch, req.device_archs, "device arch"),
    ]
    for value, allowed, what in checks:
        if value is None or allowed is None:
            continue
        values = [value]
        if what == "weight format":
            values = [v for v in value.split(",") if v != "dense"] or ["dense"]
        unserved = [v for v in values if v not in allowed]
        if unserved:
            shown = _dtype_name(value) if isinstance(value, torch.dtype) else ",".join(map(str, unserved))
            return f"{what} {shown} not supported (supports {_listed(allowed)})"
    needed = sorted(f for f in ctx.features if FEATURE_OPS.get(f) == candidate.op and f not in req.features)
    if needed and candidate.family != REFERENCE_FAMILY:
        return f"model needs {', '.join(needed)}, which this candidate does not serve"
    missing = [p for p in req.packages if not ctx.package_present(p)]
    if missing:
        return f"{', '.join(missing)} not importable"
    if req.min_capability and ctx.device_capability and ctx.device_capability < req.min_capability:
        need, have = (".".join(map(str, c)) for c in (req.min_capability, ctx.device_capability))
        return f"needs device capability {need}, device has {have}"
    return None


@dataclass(frozen=True)
class Rejected:
    candidate: Candidate
    reason: str
    eligible: bool
    """True when it could serve but a preferred candidate won: op parity still tests it."""


@dataclass(frozen=True)
class OpChoice:
    op: str
    chosen: Candidate
    rejected: tuple[Rejected, ...]
    path: str | None = None
    """The chosen candidate's code path for this model (`Candidate.path`), when it has one."""

    @property
    def native(self) -> bool:
        return self.chosen.family != REFERENCE_FAMILY

    def eligible(self) -> list[Candidate]:
        """Every candidate that could serve this op, the chosen one first."""
        return [self.chosen, *(r.candidate for r in self.rejected if r.eligible)]


class SelectionError(ValueError):
    """An override names a candidate that does not exist or is not eligible."""


def reference_candidate(op: str) -> Candidate:
    return Candidate(op=op, family=REFERENCE_FAMILY, qualname=REFERENCE_OPS[op])


def choose(
    op: str,
    candidates: Sequence[Candidate],
    families: Sequence[str],
    ctx: SelectionContext,
    override: str | None = None,
    force_reference: bool = False,
) -> OpChoice:
    """One op's choice among `candidates` (any families; those not in `families` are ignored).

    `override` names the family that must serve the op; `force_reference` binds the reference.
    """
    order = {family: rank for rank, family in enumerate(families)}
    ranked = sorted(
        (c for c in candidates if c.op == op and c.family in order), key=lambda c: (order[c.family], -c.priority)
    )
    ranked.append(reference_candidate(op))
    reasons = {c: ineligibility(c, ctx) for c in ranked}
    if force_reference:
        chosen = ranked[-1]
        lost = "every op forced to its reference"
    elif override is not None:
        named = [c for c in ranked if c.family == override]
        if not named:
            offered = ", ".join(dict.fromkeys(c.family for c in ranked))
            raise SelectionError(f"{op}={override}: no {override} candidate for {op} here (candidates: {offered})")
        eligible = [c for c in named if reasons[c] is None]
        if not eligible:
            raise SelectionError(f"{op}={override}: not eligible: {reasons[named[0]]}")
        chosen = eligible[0]
        lost = f"overridden: {op}={override}"
    else:
        chosen = next(c for c in ranked if reasons[c] is None)
        lost = f"{chosen.family} preferred"
    rejected = tuple(Rejected(c, reasons[c] or lost, eligible=reasons[c] is None) for c in ranked if c is not chosen)
    path = chosen.path(ctx) if chosen.path is not None else None
    return OpChoice(op=op, chosen=chosen, rejected=rejected, path=path)


@dataclass(frozen=True)
class OpTable:
    """The chosen implementation of every op, and why each other candidate lost."""

    owner: str
    choices: tuple[OpChoice, ...]
    forced_reference: bool = False
    header: str = ""
    """A line shown above the table (for a device this machine lacks: why it is unavailable)."""

    def __getitem__(self, op: str) -> OpChoice:
        return next(c for c in self.choices if c.op == op)

    def summary(self) -> str:
        """One log line: `op=family` for every op."""
        return ", ".join(f"{c.op}={c.chosen.family}" for c in self.choices)

    def as_dict(self) -> dict[str, object]:
        return {
            "platform": self.owner,
            "header": self.header,
            "forced_reference": self.forced_reference,
            "ops": [
                {
                    "op": c.op,
                    "family": c.chosen.family,
                    "candidate": c.chosen.qualname,
                    "path": c.path,
                    "rejected": [
                        {"family": r.candidate.family, "candidate": r.candidate.qualname, "reason": r.reason}
                        for r in c.rejected
                    ],
                }
                for c in self.choices
            ],
        }

    def render(self) -> str:
        """The table `sglang ops` prints."""
        rows = [("op", "family", "candidate", "other candidates")]
        for c in self.choices:
            others = "; ".join(f"{r.candidate.family}: {r.reason}" for r in c.rejected) or "-"
            candidate = c.chosen.qualname + (f" ({c.path})" if c.path else "")
            rows.append((c.op, c.chosen.family, candidate, others))
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        lines = ["  ".join(cell.ljust(w) for cell, w in zip(r[:3], widths)) + "  " + r[3] for r in rows]
        lines.insert(1, "  ".join("-" * w for w in widths) + "  " + "-" * len(rows[0][3]))
        head = [f"{self.owner}: {self.header}"] if self.header else [f"{self.owner}:"]
        return "\n".join([*head, *lines])


def select(
    owner: str,
    candidates: Sequence[Candidate],
    families: Sequence[str],
    ctx: SelectionContext,
    overrides: Mapping[str, str] | None = None,
    force_reference: bool = False,
    header: str = "",
) -> OpTable:
    """The op table for every op in `REFERENCE_OPS`; raises SelectionError for a bad override."""
    overrides = dict(overrides or {})
    unknown = set(overrides) - set(REFERENCE_OPS)
    if unknown:
        raise SelectionError(
            f"unknown op(s) in override: {', '.join(sorted(unknown))} (ops: {', '.join(REFERENCE_OPS)})"
        )
    choices = tuple(choose(op, candidates, families, ctx, overrides.get(op), force_reference) for op in REFERENCE_OPS)
    return OpTable(owner=owner, choices=choices, forced_reference=force_reference, header=header)
