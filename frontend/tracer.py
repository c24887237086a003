"""The tracer: run a program body against a recording state to get its IR, without a backend.

Arguments not given become `SglArgument` placeholders and `s["x"]` becomes an `SglVariable`, so
the trace is a graph of streams (the program, its forks, the sgl functions it calls) whose nodes
reference each other's variables. A body that needs a placeholder's *value* (an f-string, `if`,
`len`) cannot be traced and raises `TracingError`.

The same machinery extracts a program's constant prefix: tracing stops (`StopTracing`) at the
first expression that is not constant text or a role marker, and the constant part is rendered
with the backend's chat template exactly as the interpreter would render it.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from sglang.frontend.chat_template import ChatTemplateLike
from sglang.frontend.errors import StopTracing, TracingError
from sglang.frontend.ir import (
    SglArgument,
    SglCall,
    SglConstantText,
    SglExpr,
    SglExprList,
    SglFork,
    SglJoin,
    SglRoleBegin,
    SglRoleEnd,
    SglSetVar,
    SglVariable,
    SglVarScopeBegin,
    SglVarScopeEnd,
    flatten,
    lift,
)
from sglang.frontend.transcript import Transcript

if TYPE_CHECKING:
    from sglang.frontend.function import SglFunction

_CONSTANT = (SglConstantText, SglRoleBegin, SglRoleEnd)

# The stream being traced on this thread; an sgl function called inside it is traced, not run.
_current_tracer: contextvars.ContextVar[TracerProgramState | None] = contextvars.ContextVar("sgl_tracer", default=None)


def current_tracer() -> TracerProgramState | None:
    return _current_tracer.get()


class TracerProgramState:
    """The `s` of a traced program. `nodes` is the stream's IR in program order (flattened)."""

    def __init__(self, arguments: dict[str, Any], *, prefix_only: bool = False, counter: Iterator[int] | None = None):
        self.arguments = arguments
        self.prefix_only = prefix_only
        self.nodes: list[SglExpr] = []
        self._counter = counter or itertools.count()
        self.stream_index = next(self._counter)

    def _child(self, arguments: dict[str, Any]) -> TracerProgramState:
        return TracerProgramState(arguments, prefix_only=self.prefix_only, counter=self._counter)

    def _record(self, expr: SglExpr) -> None:
        leaves = flatten(expr)
        self.nodes.extend(leaves)
        if self.prefix_only and not all(isinstance(e, _CONSTANT) for e in leaves):
            raise StopTracing

    def __iadd__(self, other: Any) -> TracerProgramState:
        self._record(lift(other))
        return self

    def _role(self, role: str, expr: Any = None) -> Any:
        if expr is not None:
            self._record(SglExprList([SglRoleBegin(role), lift(expr), SglRoleEnd(role)]))
            return None
        return self._role_scope(role)

    @contextmanager
    def _role_scope(self, role: str) -> Iterator[None]:
        self._record(SglRoleBegin(role))
        yield
        self._record(SglRoleEnd(role))

    def system(self, expr: Any = None) -> Any:
        return self._role("system", expr)

    def user(self, expr: Any = None) -> Any:
        return self._role("user", expr)

    def assistant(self, expr: Any = None) -> Any:
        return self._role("assistant", expr)

    @contextmanager
    def var_scope(self, name: str) -> Iterator[None]:
        self._record(SglVarScopeBegin(name))
        yield
        self._record(SglVarScopeEnd(name))

    def fork(self, size: int = 1) -> TracerForkGroup:
        children = [self._child({}) for _ in range(int(size))]
        self._record(SglFork(children))
        return TracerForkGroup(self, children)

    def call(self, function: SglFunction, arguments: dict[str, Any]) -> TracerProgramState:
        """Trace `function` as its own stream and record the call here."""
        callee = self._child({})
        trace_into(callee, function, arguments)
        self._record(SglCall(callee))
        return callee

    def get_var(self, name: str) -> SglVariable:
        return SglVariable(name, self)

    __getitem__ = get_var

    def set_var(self, name: str, value: Any) -> None:
        self._record(SglSetVar(name, value))

    __setitem__ = set_var

    def _runtime_only(self, *_: Any, **__: Any) -> Any:
        raise TracingError("text(), messages() and meta info exist only when the program runs, not while tracing")

    text = messages = get_meta_info = sync = _runtime_only

    def streams(self) -> list[TracerProgramState]:
        """This stream and every stream it forks or calls, depth first, in creation order."""
        out = [self]
        for node in self.nodes:
            for child in (
                node.children if isinstance(node, SglFork) else [node.callee] if isinstance(node, SglCall) else []
            ):
                out.extend(child.streams())
        return out

    def print_graph(self) -> None:
        print(self.graph_text())

    def graph_text(self) -> str:
        lines = []
        for stream in self.streams():
            lines.append(f"stream {stream.stream_index}:")
            lines.extend(f"  {_describe(n)}" for n in stream.nodes)
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"TracerProgramState(stream {self.stream_index}, {len(self.nodes)} nodes)"


class TracerForkGroup:
    def __init__(self, parent: TracerProgramState, children: list[TracerProgramState]):
        self.parent = parent
        self.states = children

    def __getitem__(self, i: int) -> TracerProgramState:
        return self.states[i]

    def __len__(self) -> int:
        return len(self.states)

    def __iter__(self) -> Iterator[TracerProgramState]:
        return iter(self.states)

    def __iadd__(self, other: Any) -> TracerForkGroup:
        for i, state in enumerate(self.states):
            state += other(i) if callable(other) and not isinstance(other, SglExpr) else other
        return self

    def join(self, mode: str = "gather_variable") -> None:
        if mode not in ("gather_variable", "concate_and_append"):
            raise ValueError(f"unknown join mode {mode!r}")
        self.parent._record(SglJoin(self.states, mode))


def _describe(node: SglExpr) -> str:
    if isinstance(node, SglConstantText):
        return f"Constant({node.value!r})"
    if isinstance(node, SglFork):
        return f"Fork(streams {[c.stream_index for c in node.children]})"
    if isinstance(node, SglJoin):
        return f"Join({node.mode}, streams {[c.stream_index for c in node.children]})"
    if isinstance(node, SglCall):
        return f"Call(stream {node.callee.stream_index})"
    if isinstance(node, (SglArgument, SglVariable)):
        return repr(node)
    fields = getattr(node, "__dataclass_fields__", {})
    shown = ", ".join(f"{k}={getattr(node, k)!r}" for k in fields if k in ("name", "role", "choices", "path"))
    return f"{type(node).__name__}({shown})"


def trace_into(tracer: TracerProgramState, function: SglFunction, arguments: dict[str, Any]) -> None:
    """Run `function`'s body on `tracer`; arguments not given (nor bound) become placeholders."""
    given = {**arguments, **function.bind_arguments}
    tracer.arguments = {name: given.get(name, SglArgument(name)) for name in function.arg_names}
    token = _current_tracer.set(tracer)
    try:
        function.func(tracer, **tracer.arguments)
    finally:
        _current_tracer.reset(token)


def trace_program(function: SglFunction, arguments: dict[str, Any]) -> TracerProgramState:
    tracer = TracerProgramState({})
    trace_into(tracer, function, arguments)
    return tracer


def extract_prefix(function: SglFunction, template: ChatTemplateLike) -> str:
    """The text every run of `function` starts with, whatever its (unbound) arguments; may be ""."""
    tracer = TracerProgramState({}, prefix_only=True)
    # StopTracing, or a body that needs an argument's value: the prefix is what came before.
    with contextlib.suppress(Exception):
        trace_into(tracer, function, {})
    transcript = Transcript(template)
    try:
        for node in tracer.nodes:
            if isinstance(node, SglConstantText):
                transcript.fill(node.value)
            elif isinstance(node, SglRoleBegin):
                transcript.begin_role(node.role)
            elif isinstance(node, SglRoleEnd):
                transcript.end_role(node.role)
            else:
                break
    except ValueError:
        pass  # a malformed role sequence: the runtime will report it; the prefix stops here
    return transcript.text
