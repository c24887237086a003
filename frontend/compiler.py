"""`f.compile()`: trace a program once, then run its IR graph without re-running the Python body.

Running a compiled graph creates one executor per traced stream (the program, its forks, the
sgl functions it calls), binds the arguments into the nodes, and starts every stream at once:
streams run in parallel and wait only where a node reads another stream's variable or where a
fork needs its parent's text. The observable result equals `f.run(...)` for any traceable program.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

from sglang.frontend.backend.base import BaseBackend
from sglang.frontend.config import global_config, resolve_backend
from sglang.frontend.executor import StreamExecutor
from sglang.frontend.function import SglFunction, _split
from sglang.frontend.ir import (
    SglArgument,
    SglCall,
    SglConcateAndAppend,
    SglExpr,
    SglFork,
    SglJoin,
    SglVariable,
    lift,
)
from sglang.frontend.run import cache_program, run_batch
from sglang.frontend.sampling_params import SamplingParams
from sglang.frontend.state import ProgramState
from sglang.frontend.stream_nodes import ForkPoint, Gather, declared_names_of
from sglang.frontend.tracer import TracerProgramState, trace_program


class CompiledFunction:
    def __init__(self, function: SglFunction, backend: Any = None):
        self.function = function
        self.backend = backend
        self.root: TracerProgramState = trace_program(function, {})

    def print_graph(self) -> None:
        self.root.print_graph()

    def run(self, *, backend: Any = None, **kwargs: Any) -> ProgramState:
        kwargs, params = _split(kwargs)
        return self._launch(resolve_backend(backend or self.backend), params, kwargs)

    def run_batch(
        self,
        batch_kwargs: list[dict[str, Any]],
        *,
        backend: Any = None,
        num_threads: int | str = "auto",
        progress_bar: bool = False,
        generator_style: bool = False,
        **sampling: Any,
    ) -> list[ProgramState] | Iterator[ProgramState]:
        if not batch_kwargs:
            return iter([]) if generator_style else []
        _, params = _split(sampling)
        engine = resolve_backend(backend or self.backend)
        if global_config.enable_precache_with_tracing and len(batch_kwargs) > 1:
            cache_program(self.function, engine)
        runner = functools.partial(self._launch_synced, engine, params)
        return run_batch(runner, [dict(k) for k in batch_kwargs], num_threads, progress_bar, generator_style)

    def _launch_synced(self, backend: BaseBackend, params: SamplingParams, kwargs: dict[str, Any]) -> ProgramState:
        state = self._launch(backend, params, kwargs)
        state.error()
        return state

    def _launch(self, backend: BaseBackend, params: SamplingParams, kwargs: dict[str, Any]) -> ProgramState:
        values = self._argument_values(kwargs)
        streams = self.root.streams()
        executors = {id(t): StreamExecutor(backend, params, autostart=False) for t in streams}
        # Pass 1: wire forks, so every executor exists before any node referring to it is bound.
        points: dict[int, ForkPoint] = {}
        for tracer in streams:
            for node in tracer.nodes:
                if isinstance(node, SglFork):
                    point = ForkPoint([executors[id(c)] for c in node.children], commit=len(node.children) > 1)
                    for child in point.children:
                        child.await_fork(point)
                    points[id(node)] = point
        # Pass 2: submit every stream's nodes, bound to this run's values and executors.
        for tracer in streams:
            exe = executors[id(tracer)]
            declared: set[str] = set()
            for node in tracer.nodes:
                bound = _bind(node, values, executors, points, declared)
                declared.update(declared_names_of(node))
                if bound is not None:
                    exe.submit(bound)
        for exe in executors.values():
            exe.start()
        for exe in executors.values():
            exe.end()
        return ProgramState(executors[id(self.root)])

    def _argument_values(self, kwargs: dict[str, Any]) -> dict[int, Any]:
        given = {**self.function.arg_defaults, **kwargs, **self.function.bind_arguments}
        values = {}
        for name, placeholder in self.root.arguments.items():
            if isinstance(placeholder, SglArgument):
                if name not in given:
                    raise TypeError(f"{self.function.func.__name__}() missing argument {name!r}")
                values[id(placeholder)] = given[name]
        return values


def _bind(
    node: SglExpr,
    values: dict[int, Any],
    executors: dict[int, StreamExecutor],
    points: dict[int, ForkPoint],
    declared: set[str],
) -> SglExpr | None:
    """The node to submit for this run; None for nodes with no work of their own (calls)."""
    if isinstance(node, SglArgument):
        if id(node) not in values:
            raise TypeError(f"argument {node.name!r} of a called sgl function was not given")
        return lift(values[id(node)])
    if isinstance(node, SglVariable):
        return SglVariable(node.name, executors[id(node.source)])
    if isinstance(node, SglFork):
        return points[id(node)]
    if isinstance(node, SglJoin):
        children = [executors[id(c)] for c in node.children]
        if node.mode == "concate_and_append":
            return SglConcateAndAppend(children)
        names = {n for c in node.children for e in c.nodes for n in declared_names_of(e)} - declared
        return Gather(children, sorted(names))
    if isinstance(node, SglCall):
        return None  # the callee's stream runs on its own executor
    return node
