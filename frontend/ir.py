"""The IR: the expressions a program appends to its state with `s += ...`.

Invariants:
- Nodes are compared by identity (`eq=False`): two `gen("x")` calls are two different nodes.
- `a + b` on nodes (or a node and a str) builds one flat `SglExprList`; strings become
  `SglConstantText`. Nothing here talks to a backend: the interpreter gives nodes meaning.
- `SglArgument` and `SglVariable` are placeholders of values unknown while tracing; any use of
  their value (str(), len(), bool(), ==, f-strings, iteration) raises `TracingError`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sglang.frontend.choices import ChoicesSamplingMethod
from sglang.frontend.errors import TracingError
from sglang.frontend.sampling_params import REGEX_BOOL, REGEX_FLOAT, REGEX_INT, REGEX_STR, GenParams

__all__ = [
    "REGEX_BOOL",
    "REGEX_FLOAT",
    "REGEX_INT",
    "REGEX_STR",
    "SglArgument",
    "SglCall",
    "SglCommitLazy",
    "SglConcateAndAppend",
    "SglConstantText",
    "SglExpr",
    "SglExprList",
    "SglFork",
    "SglGen",
    "SglImage",
    "SglJoin",
    "SglRoleBegin",
    "SglRoleEnd",
    "SglSelect",
    "SglSeparateReasoning",
    "SglSetVar",
    "SglVarScopeBegin",
    "SglVarScopeEnd",
    "SglVariable",
    "SglVideo",
    "flatten",
    "lift",
]


class SglExpr:
    """Base of every node; `+` concatenates into a flat expression list."""

    def __add__(self, other: Any) -> SglExprList:
        return SglExprList([*_flat(self), *_flat(lift(other))])

    def __radd__(self, other: Any) -> SglExprList:
        return SglExprList([*_flat(lift(other)), *_flat(self)])


def lift(value: Any) -> SglExpr:
    """A node for anything a program may append: nodes as they are, text (and numbers) as constants."""
    if isinstance(value, SglExpr):
        return value
    if isinstance(value, str):
        return SglConstantText(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return SglConstantText(str(value))
    raise TypeError(f"cannot append {type(value).__name__} to a program state; append str or sgl expressions")


def _flat(expr: SglExpr) -> list[SglExpr]:
    return list(expr.exprs) if isinstance(expr, SglExprList) else [expr]


def flatten(expr: SglExpr) -> list[SglExpr]:
    """The leaf nodes of `expr` in order (nested expression lists dissolved)."""
    if isinstance(expr, SglExprList):
        return [leaf for e in expr.exprs for leaf in flatten(e)]
    return [expr]


@dataclass(eq=False)
class SglExprList(SglExpr):
    exprs: list[SglExpr]


@dataclass(eq=False)
class SglConstantText(SglExpr):
    value: str


@dataclass(eq=False)
class SglGen(SglExpr):
    """A generation; its output is appended to the text and stored as variable `name` (if named)."""

    name: str | None
    params: GenParams = field(default_factory=GenParams)


@dataclass(eq=False)
class SglSelect(SglExpr):
    """Pick one of `choices` by the likelihood the backend scores; the pick is appended and stored."""

    name: str | None
    choices: list[str]
    temperature: float
    choices_method: ChoicesSamplingMethod


@dataclass(eq=False)
class SglRoleBegin(SglExpr):
    role: str


@dataclass(eq=False)
class SglRoleEnd(SglExpr):
    role: str


@dataclass(eq=False)
class SglImage(SglExpr):
    path: str


@dataclass(eq=False)
class SglVideo(SglExpr):
    path: str
    num_frames: int


@dataclass(eq=False)
class SglVarScopeBegin(SglExpr):
    """Opens a scope whose text (up to the matching end) becomes variable `name`."""

    name: str


@dataclass(eq=False)
class SglVarScopeEnd(SglExpr):
    name: str


@dataclass(eq=False)
class SglSetVar(SglExpr):
    """`s["name"] = value`: set a variable in program order."""

    name: str
    value: Any


@dataclass(eq=False)
class SglCommitLazy(SglExpr):
    """Ask the backend to prefill the text so far (forks then share its cached prefix)."""


@dataclass(eq=False)
class SglConcateAndAppend(SglExpr):
    """Append the forks' new text to the parent, in fork order (join mode "concate_and_append")."""

    states: list[Any]


@dataclass(eq=False)
class SglSeparateReasoning(SglExpr):
    """Split the reasoning of the preceding gen/select(s) in `expr` into `<name>_reasoning_content`."""

    model_type: str | None
    expr: SglExpr | None


class _Placeholder(SglExpr):
    """A value that exists only when the program runs; using it while tracing raises TracingError."""

    def _refuse(self, *_: Any, **__: Any) -> Any:
        raise TracingError(
            f"the program uses the value of {self!r} while tracing (str(), len(), bool(), ==, f-string or "
            "iteration); such a program cannot be traced or compiled"
        )

    __str__ = __format__ = __len__ = __iter__ = __bool__ = __getitem__ = __int__ = __float__ = _refuse
    __eq__ = __ne__ = __lt__ = __gt__ = __contains__ = _refuse  # type: ignore[assignment]
    __hash__ = object.__hash__


@dataclass(eq=False, repr=False)
class SglArgument(_Placeholder):
    """A program argument not given to the tracer."""

    name: str

    def __repr__(self) -> str:
        return f"Argument({self.name})"


@dataclass(eq=False, repr=False)
class SglVariable(_Placeholder):
    """Variable `name` of another traced stream (`source`), read where this node is appended."""

    name: str
    source: Any

    def __repr__(self) -> str:
        return f"Variable({self.name} of stream {getattr(self.source, 'stream_index', '?')})"


@dataclass(eq=False)
class SglFork(SglExpr):
    """Traced `s.fork(n)`: `children` are the traced streams that start from this point."""

    children: list[Any]


@dataclass(eq=False)
class SglJoin(SglExpr):
    """Traced `forks.join(mode)`."""

    children: list[Any]
    mode: str


@dataclass(eq=False)
class SglCall(SglExpr):
    """Traced call of another sgl function: `callee` is the traced stream of its own program state."""

    callee: Any
