"""The interpreter: executes one program stream's expressions on its own worker thread.

The program body (Python, on the caller's thread) only submits expressions; the worker executes
them in order, calling the backend. The caller blocks only when it reads something: a variable
(`get_var`), the text (`text()`), or explicitly (`sync()`).

Invariants:
- Expressions execute in submission order, one at a time, on the worker thread only.
- Every variable a submitted expression will produce is declared at submission (variables.py),
  so a read issued after the submission waits for exactly that value.
- A failing expression stores the exception, releases every waiter (variables and forks), and
  turns the rest of the queue into no-ops: nobody hangs. Reads of values that were never produced
  raise `ProgramError` chained to the original exception.
- Forks get their starting transcript when the parent's worker reaches the fork point, so
  forking never blocks the caller.
"""

from __future__ import annotations

import base64
import itertools
import queue
import threading
import uuid
from typing import Any

from sglang.frontend.backend.base import BaseBackend, Prompt
from sglang.frontend.chat_template import ChatTemplateLike
from sglang.frontend.errors import BackendCapabilityError, ProgramError
from sglang.frontend.ir import (
    SglArgument,
    SglCommitLazy,
    SglConcateAndAppend,
    SglConstantText,
    SglExpr,
    SglExprList,
    SglGen,
    SglImage,
    SglRoleBegin,
    SglRoleEnd,
    SglSelect,
    SglSeparateReasoning,
    SglSetVar,
    SglVariable,
    SglVarScopeBegin,
    SglVarScopeEnd,
    SglVideo,
    lift,
)
from sglang.frontend.reasoning import reasoning_var_name, split_reasoning
from sglang.frontend.sampling_params import SamplingParams
from sglang.frontend.speculative import ChatTurnPlan, CompletionSpeculator
from sglang.frontend.stream_nodes import AwaitFork, ForkPoint, Gather, declared_names_of
from sglang.frontend.transcript import ImageData, Transcript
from sglang.frontend.variables import VariableTable

_END = object()  # queue marker: no more expressions for now


class StreamExecutor:
    _ids = itertools.count()

    def __init__(
        self,
        backend: BaseBackend,
        default_params: SamplingParams,
        *,
        stream: bool = False,
        num_api_spec_tokens: int | None = None,
        chat_template: ChatTemplateLike | None = None,
        autostart: bool = True,
    ):
        self.sid = uuid.uuid4().hex
        self.backend = backend
        self.default_params = default_params
        self.stream = stream
        self.num_api_spec_tokens = num_api_spec_tokens
        self.transcript = Transcript(chat_template or backend.get_chat_template())
        self.vars = VariableTable()
        self.fork_start = 0  # where this stream's own text begins, for a forked stream
        self._speculator = CompletionSpeculator(num_api_spec_tokens) if num_api_spec_tokens else None
        self._turn: tuple[ChatTurnPlan, Prompt] | None = None  # an open speculative chat turn
        self._origin: ForkPoint | None = None
        self._scopes: dict[str, int] = {}
        self._fork_points: list[ForkPoint] = []
        self._fork_lock = threading.Lock()
        self._start_lock = threading.Lock()
        self._progress = threading.Condition()
        self._version = 0
        self._finished = False
        self._ended = False
        self._queue: queue.Queue = queue.Queue()
        self._worker: threading.Thread | None = None
        if autostart:
            self.start()

    @property
    def error(self) -> BaseException | None:
        return self.vars.error

    @property
    def variables(self) -> dict[str, Any]:
        return self.vars.values

    @property
    def finished(self) -> bool:
        return self._finished

    # ---- caller side -------------------------------------------------------------------------

    def start(self) -> None:
        self._worker = threading.Thread(target=self._work, name=f"sgl-stream-{next(self._ids)}", daemon=True)
        self._worker.start()

    def submit(self, expr: Any) -> None:
        expr = lift(expr)
        self.vars.declare(declared_names_of(expr))
        if isinstance(expr, ForkPoint):
            with self._fork_lock:
                self._fork_points.append(expr)
            if self.error is not None:
                self._release_forks()
        with self._start_lock:
            if self._ended and self._worker is not None:
                # More input after end(): the old worker stops at its end marker; a new one continues.
                self._worker.join()
                self._ended = False
                with self._progress:
                    self._finished = False
                self._queue.put(expr)
                self.start()
            else:
                self._queue.put(expr)

    def end(self) -> None:
        """No more input is expected: the worker exits once the queue drains."""
        with self._start_lock:
            if self._ended:
                return
            self._ended = True
            self._queue.put(_END)

    def fork(self, size: int) -> list[StreamExecutor]:
        point = ForkPoint(children=[], commit=size > 1)
        for _ in range(size):
            child = StreamExecutor(
                self.backend,
                self.default_params,
                stream=self.stream,
                num_api_spec_tokens=self.num_api_spec_tokens,
                chat_template=self.transcript.template,
            )
            child.await_fork(point)
            point.children.append(child)
        self.submit(point)
        return point.children

    def await_fork(self, point: ForkPoint) -> None:
        """Make this (new) stream start from its parent's state at `point`."""
        self._origin = point
        self.submit(AwaitFork(point))

    def sync(self) -> None:
        """Wait until every submitted expression ran; raise ProgramError if the stream failed."""
        self._queue.join()
        if self.error is not None:
            raise ProgramError(self.error) from self.error

    def get_var(self, name: str) -> Any:
        if self._origin is not None and not self.vars.is_declared(name):
            self._origin.ready.wait()  # an inherited variable exists once the parent forked
        return self.vars.get(name)

    def get_meta_info(self, name: str) -> Any:
        self.get_var(name)
        return self.vars.meta_info.get(name)

    def set_var(self, name: str, value: Any) -> None:
        self.submit(SglSetVar(name, value))

    def wait_progress(self, seen: int, timeout: float | None = None) -> int:
        """Block until the text changed after version `seen` or the stream finished; return the version."""
        with self._progress:
            self._progress.wait_for(lambda: self._version > seen or self._finished, timeout)
            return self._version

    def prompt(self) -> Prompt:
        t = self.transcript
        return Prompt(self.sid, t.text, tuple(t.messages), tuple(t.images), t.role, t.role_text)

    # ---- worker side -------------------------------------------------------------------------

    def _notify(self, finished: bool = False) -> None:
        with self._progress:
            self._version += 1
            self._finished = self._finished or finished
            self._progress.notify_all()

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is _END:
                    self._notify(finished=True)
                    return
                if self.error is None:
                    try:
                        self._execute(item)
                    except Exception as e:
                        self.vars.fail(e)
                        self._release_forks()
                    self._notify()
            finally:
                self._queue.task_done()

    def _release_forks(self) -> None:
        with self._fork_lock:
            for point in self._fork_points:
                if not point.ready.is_set():
                    point.error = self.error
                    point.ready.set()

    def _execute(self, expr: SglExpr) -> None:
        if self._turn is not None and not isinstance(expr, (SglExprList, SglConstantText, SglGen, SglRoleEnd)):
            raise BackendCapabilityError(f"a speculative chat turn holds only text and gen, not {type(expr).__name__}")
        if isinstance(expr, SglExprList):
            for e in expr.exprs:
                self._execute(e)
        elif isinstance(expr, SglConstantText):
            self._fill(expr.value)
        elif isinstance(expr, SglGen):
            self._gen(expr)
        elif isinstance(expr, SglSelect):
            self._select(expr)
        elif isinstance(expr, SglRoleBegin):
            self.transcript.begin_role(expr.role)
            if expr.role == "assistant" and self.num_api_spec_tokens and self.backend.is_chat_model:
                self._turn = (ChatTurnPlan(self.num_api_spec_tokens), self.prompt())
        elif isinstance(expr, SglRoleEnd):
            self._end_turn()
            self.transcript.end_role(expr.role)
        elif isinstance(expr, SglVarScopeBegin):
            self._scopes[expr.name] = len(self.transcript.text)
        elif isinstance(expr, SglVarScopeEnd):
            self.vars.set(expr.name, self.transcript.text[self._scopes.pop(expr.name) :])
        elif isinstance(expr, SglSetVar):
            self.vars.set(expr.name, expr.value)
        elif isinstance(expr, SglVariable):
            self._fill(str(expr.source.get_var(expr.name)))
        elif isinstance(expr, SglImage):
            self._image(expr)
        elif isinstance(expr, SglVideo):
            raise BackendCapabilityError(f"{type(self.backend).__name__} does not accept video input")
        elif isinstance(expr, SglSeparateReasoning):
            self._separate_reasoning(expr)
        elif isinstance(expr, SglCommitLazy):
            self.backend.commit_lazy_operations(self.prompt())
        elif isinstance(expr, ForkPoint):
            self._fork_point(expr)
        elif isinstance(expr, AwaitFork):
            expr.point.ready.wait()
            if expr.point.error is not None:
                raise ProgramError(expr.point.error) from expr.point.error
        elif isinstance(expr, Gather):
            self._gather(expr)
        elif isinstance(expr, SglConcateAndAppend):
            self._concatenate(expr)
        elif isinstance(expr, SglArgument):
            raise ValueError(f"argument {expr.name!r} was not given a value")
        else:
            raise TypeError(f"cannot execute {type(expr).__name__}")

    def _fill(self, value: str) -> None:
        if self._turn is not None:
            self._turn[0].add_text(value)
            return
        if self._speculator is not None:
            self._speculator.on_fill(value)
        self.transcript.fill(value)

    def _gen(self, expr: SglGen) -> None:
        params = self.default_params.merged(expr.params, tuple(self.transcript.template.stop_str))
        if self._turn is not None:
            self._turn[0].add_gen(expr.name, params)
            if expr.name is not None:
                self.vars.defer(expr.name)
            return
        if self.stream:
            self._gen_stream(expr.name, params)
            return
        if self._speculator is not None and not self.backend.is_chat_model:
            text, meta = self._speculator.generate(self.backend, self.prompt(), params)
        else:
            text, meta = self.backend.generate(self.prompt(), params)
        self.transcript.fill(text[0] if isinstance(text, list) else text)
        if expr.name is not None:
            self.vars.set(expr.name, text, meta)

    def _end_turn(self) -> None:
        if self._turn is None:
            return
        (plan, prompt), self._turn = self._turn, None
        for text, name in plan.resolve(self.backend, prompt):
            self.transcript.fill(text)
            if name is not None:
                self.vars.set(name, text, {"speculative": True})

    def _gen_stream(self, name: str | None, params: SamplingParams) -> None:
        value, meta = "", {}
        for piece, meta in self.backend.generate_stream(self.prompt(), params):
            value += piece
            self.transcript.fill(piece)
            if name is not None:
                self.vars.show(name, value, meta)
            self._notify()
        if name is not None:
            self.vars.set(name, value, meta)

    def _select(self, expr: SglSelect) -> None:
        decision = self.backend.select(self.prompt(), expr.choices, expr.temperature, expr.choices_method)
        self._fill(decision.decision)
        if expr.name is not None:
            self.vars.set(expr.name, decision.decision, decision.meta_info)

    def _image(self, expr: SglImage) -> None:
        if not self.backend.supports_images:
            raise BackendCapabilityError(
                f"{type(self.backend).__name__} ({self.backend.get_model_name()}) does not accept images"
            )
        with open(expr.path, "rb") as f:
            data = base64.b64encode(f.read()).decode()
        self.transcript.add_image(ImageData(expr.path, data))

    def _separate_reasoning(self, expr: SglSeparateReasoning) -> None:
        if self.stream or expr.expr is None:
            return  # streamed text was already shown to the reader; it is not rewritten
        for name in declared_names_of(expr.expr):
            raw = self.vars.values[name]
            reasoning, answer = split_reasoning(raw, expr.model_type)
            self.transcript.replace_tail(raw, answer)
            self.vars.set(name, answer)
            self.vars.set(reasoning_var_name(name), reasoning)

    def _fork_point(self, point: ForkPoint) -> None:
        if point.commit and self.transcript.text:
            self.backend.commit_lazy_operations(self.prompt())
        for child in point.children:
            child.transcript = self.transcript.copy()
            child.vars.inherit(self.vars)
            child.fork_start = len(self.transcript.text)
        point.ready.set()

    def _gather(self, expr: Gather) -> None:
        for child in expr.children:
            child.sync()
        for name in expr.names:
            self.vars.set(name, [c.variables[name] for c in expr.children if name in c.variables])

    def _concatenate(self, expr: SglConcateAndAppend) -> None:
        children = [getattr(s, "stream_executor", s) for s in expr.states]
        for child in children:
            child.sync()
        branches = [c.transcript.text[c.fork_start :] for c in children]
        # The branches' KV continues the text they forked from: only when this stream still ends
        # there can the backend reuse it (parallel encoding); otherwise the text alone is joined.
        if any(branches) and all(c.transcript.text[: c.fork_start] == self.transcript.text for c in children):
            self.backend.concatenate_and_append(self.prompt(), branches)
        self._fill("".join(branches))
