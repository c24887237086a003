"""`s`, the program state a program body writes to, and the group `s.fork(n)` returns.

A `ProgramState` is a thin front of one `StreamExecutor`: appending submits, reading blocks.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

from sglang.frontend.errors import ProgramError
from sglang.frontend.executor import StreamExecutor
from sglang.frontend.ir import (
    SglConcateAndAppend,
    SglExpr,
    SglExprList,
    SglRoleBegin,
    SglRoleEnd,
    SglVarScopeBegin,
    SglVarScopeEnd,
)
from sglang.frontend.stream_nodes import Gather


class ProgramState:
    def __init__(self, stream_executor: StreamExecutor):
        self.stream_executor = stream_executor

    # ---- writing ----

    def __iadd__(self, other: Any) -> ProgramState:
        if other is None:
            raise ValueError("cannot append None to a program state")
        self.stream_executor.submit(other)
        return self

    def _role(self, role: str, expr: Any = None) -> Any:
        if expr is not None:
            self.stream_executor.submit(SglExprList([SglRoleBegin(role), expr, SglRoleEnd(role)]))
            return None
        return self._role_scope(role)

    @contextmanager
    def _role_scope(self, role: str) -> Iterator[None]:
        self.stream_executor.submit(SglRoleBegin(role))
        yield
        self.stream_executor.submit(SglRoleEnd(role))

    def system(self, expr: Any = None) -> Any:
        """`s.system("...")` appends a system message; `with s.system():` wraps what the block appends."""
        return self._role("system", expr)

    def user(self, expr: Any = None) -> Any:
        return self._role("user", expr)

    def assistant(self, expr: Any = None) -> Any:
        return self._role("assistant", expr)

    @contextmanager
    def var_scope(self, name: str) -> Iterator[None]:
        """The text the block appends becomes variable `name`."""
        self.stream_executor.submit(SglVarScopeBegin(name))
        yield
        self.stream_executor.submit(SglVarScopeEnd(name))

    def fork(self, size: int = 1) -> ProgramStateGroup:
        return ProgramStateGroup([ProgramState(e) for e in self.stream_executor.fork(int(size))], self)

    @contextmanager
    def copy(self) -> Iterator[ProgramState]:
        group = self.fork(1)
        try:
            yield group[0]
        finally:
            group.join()

    def set_var(self, name: str, value: Any) -> None:
        self.stream_executor.set_var(name, value)

    __setitem__ = set_var

    # ---- reading (blocks) ----

    def get_var(self, name: str) -> Any:
        return self.stream_executor.get_var(name)

    __getitem__ = get_var

    def __contains__(self, name: str) -> bool:
        return name in self.stream_executor.vars.names() or name in self.stream_executor.variables

    def get_meta_info(self, name: str) -> Any:
        return self.stream_executor.get_meta_info(name)

    def text(self) -> str:
        self.stream_executor.sync()
        return self.stream_executor.transcript.text

    def messages(self) -> list[dict]:
        self.stream_executor.sync()
        return self.stream_executor.transcript.messages

    def sync(self) -> None:
        self.stream_executor.sync()

    def error(self) -> BaseException | None:
        """The exception that stopped this stream, or None; never raises."""
        with contextlib.suppress(ProgramError):
            self.stream_executor.sync()
        return self.stream_executor.error

    def text_iter(self, var_name: str | None = None) -> Iterator[str]:
        """Yield new text as it is produced (a stream=True run), else the whole text once.

        With `var_name`, yield the growth of that variable only, ending when it is complete.
        Raises ProgramError at the end if the stream failed.
        """
        exe = self.stream_executor
        if not exe.stream:
            yield self.text() if var_name is None else str(self.get_var(var_name))
            return
        version, sent, done = 0, 0, False
        while not done:
            version = exe.wait_progress(version)
            done = _is_complete(exe, var_name)
            current = _current(exe, var_name)
            if len(current) > sent:
                yield current[sent:]
                sent = len(current)
        self._raise_if_failed(var_name)

    async def text_async_iter(self, var_name: str | None = None) -> AsyncIterator[str]:
        """`text_iter` for asyncio: waiting happens in a worker thread, never on the event loop."""
        exe = self.stream_executor
        if not exe.stream:
            value = await asyncio.to_thread(self.text if var_name is None else lambda: str(self.get_var(var_name)))
            yield value
            return
        version, sent, done = 0, 0, False
        while not done:
            version = await asyncio.to_thread(exe.wait_progress, version)
            done = _is_complete(exe, var_name)
            current = _current(exe, var_name)
            if len(current) > sent:
                yield current[sent:]
                sent = len(current)
        await asyncio.to_thread(self._raise_if_failed, var_name)

    def _raise_if_failed(self, var_name: str | None) -> None:
        if var_name is None:
            self.stream_executor.sync()
        else:
            self.stream_executor.get_var(var_name)

    def __del__(self) -> None:
        self.stream_executor.end()

    def __repr__(self) -> str:
        return f"ProgramState({self.text()!r})"


def _current(exe: StreamExecutor, var_name: str | None) -> str:
    if var_name is None:
        return exe.transcript.text
    value = exe.variables.get(var_name, "")
    return value if isinstance(value, str) else str(value)


def _is_complete(exe: StreamExecutor, var_name: str | None) -> bool:
    # Read before the text: whatever was complete then is fully visible in the text read after.
    if var_name is None or exe.error is not None:
        return exe.finished or exe.error is not None
    return (var_name in exe.variables and exe.vars.is_done(var_name)) or exe.finished


class ProgramStateGroup:
    """The states of `s.fork(n)`; `+=` appends to each, `join()` merges back into the parent."""

    def __init__(self, states: list[ProgramState], src_state: ProgramState):
        self.states = states
        self.src_state = src_state

    def __getitem__(self, i: int) -> ProgramState:
        return self.states[i]

    def __setitem__(self, i: int, value: ProgramState) -> None:
        """What `forks[i] += ...` stores back: the fork itself (appending returns it); no other state."""
        if value is not self.states[i]:
            raise TypeError("a fork cannot be replaced; append to it with forks[i] += ...")

    def __len__(self) -> int:
        return len(self.states)

    def __iter__(self) -> Iterator[ProgramState]:
        return iter(self.states)

    def __iadd__(self, other: Any) -> ProgramStateGroup:
        """Append `other` to every fork; a callable gets the fork index and returns what to append."""
        if not isinstance(other, (str, SglExpr)) and not callable(other):
            raise TypeError(f"cannot append {type(other).__name__} to forks")
        for i, state in enumerate(self.states):
            state += other(i) if callable(other) and not isinstance(other, SglExpr) else other
        return self

    def join(self, mode: str = "gather_variable") -> None:
        """Merge the forks into the parent, without blocking the caller.

        "gather_variable": every variable a fork created becomes, in the parent, the list of the
        forks' values (fork order). "concate_and_append": the forks' new text is appended to the
        parent's text, in fork order.
        """
        parent = self.src_state.stream_executor
        children = [s.stream_executor for s in self.states]
        if mode == "gather_variable":
            names = set().union(*(c.vars.names() for c in children)) - parent.vars.names()
            parent.submit(Gather(children, sorted(names)))
        elif mode == "concate_and_append":
            parent.submit(SglConcateAndAppend(children))
        else:
            raise ValueError(f"unknown join mode {mode!r}; use 'gather_variable' or 'concate_and_append'")
        for child in children:
            child.end()
