"""Interpreter-internal nodes that connect streams: fork points and joins.

A fork is two nodes: `ForkPoint` in the parent's queue and `AwaitFork` at the head of each child's
queue. The parent's worker hands each child a copy of its transcript and variables when it
reaches the fork point; the children wait for that. Neither blocks the program body.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from sglang.frontend.ir import (
    SglExpr,
    SglExprList,
    SglGen,
    SglSelect,
    SglSeparateReasoning,
    SglSetVar,
    SglVarScopeBegin,
)
from sglang.frontend.reasoning import reasoning_var_name


@dataclass(eq=False)
class ForkPoint(SglExpr):
    """Parent side of a fork. `ready` is set once the children have their start, or the parent failed."""

    children: list[Any]  # StreamExecutor
    commit: bool  # prefill the shared text first, so every child hits the cached prefix
    ready: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


@dataclass(eq=False)
class AwaitFork(SglExpr):
    """Child side of a fork: the child's first expression."""

    point: ForkPoint


@dataclass(eq=False)
class Gather(SglExpr):
    """Join mode "gather_variable": each named child variable becomes a list (fork order) in the parent."""

    children: list[Any]  # StreamExecutor
    names: list[str]


def declared_names_of(expr: SglExpr) -> list[str]:
    """The variables executing `expr` will produce."""
    if isinstance(expr, SglExprList):
        return [n for e in expr.exprs for n in declared_names_of(e)]
    if isinstance(expr, (SglGen, SglSelect)) and expr.name is not None:
        return [expr.name]
    if isinstance(expr, (SglVarScopeBegin, SglSetVar)):
        return [expr.name]
    if isinstance(expr, SglSeparateReasoning):
        return [reasoning_var_name(n) for n in declared_names_of(expr.expr)] if expr.expr is not None else []
    if isinstance(expr, Gather):
        return list(expr.names)
    return []
