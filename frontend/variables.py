"""The variables of one program stream and the events their readers wait on.

Invariants:
- A name is declared (an Event, and a place in `pending`) when the expression producing it is
  submitted; its event is set exactly when the value is produced, or when the stream fails.
- A value read after its event is set is final, unless the stream failed before producing it:
  then the read raises `ProgramError` chained to the stream's exception.
- A streamed value is visible (growing) in `values` before it is final.
- A deferred value (a gen inside a speculative chat turn) releases its readers with an error
  until the turn ends and sets it: reading it inside the turn would wait forever.
"""

from __future__ import annotations

import threading
from typing import Any

from sglang.frontend.errors import ProgramError


class VariableTable:
    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.meta_info: dict[str, Any] = {}
        self.error: BaseException | None = None
        self._events: dict[str, threading.Event] = {}
        self._pending: set[str] = set()
        self._deferred: set[str] = set()
        self._lock = threading.Lock()

    def declare(self, names: list[str]) -> None:
        with self._lock:
            for name in names:
                event = threading.Event()
                if self.error is not None:
                    event.set()  # nothing will ever produce it
                self._events[name] = event
                self._pending.add(name)

    def names(self) -> set[str]:
        with self._lock:
            return set(self._events)

    def is_declared(self, name: str) -> bool:
        with self._lock:
            return name in self._events

    def is_done(self, name: str) -> bool:
        with self._lock:
            event = self._events.get(name)
        return event is None or event.is_set()

    def show(self, name: str, value: Any, meta: Any = None) -> None:
        """Make a partial (streaming) value visible without completing it."""
        with self._lock:
            self.values[name] = value
            if meta is not None:
                self.meta_info[name] = meta

    def set(self, name: str, value: Any, meta: Any = None) -> None:
        with self._lock:
            self.values[name] = value
            if meta is not None:
                self.meta_info[name] = meta
            self._pending.discard(name)
            self._deferred.discard(name)
            event = self._events.get(name)
        if event is not None:
            event.set()

    def defer(self, name: str) -> None:
        with self._lock:
            self._deferred.add(name)
            event = self._events.get(name)
        if event is not None:
            event.set()

    def inherit(self, other: VariableTable) -> None:
        """Copy another stream's values (a fork starting from its parent)."""
        with other._lock:
            values, meta = dict(other.values), dict(other.meta_info)
        with self._lock:
            self.values.update(values)
            self.meta_info.update(meta)

    def get(self, name: str) -> Any:
        with self._lock:
            event = self._events.get(name)
        if event is not None:
            event.wait()
        with self._lock:
            if name in self._pending and self.error is not None:
                raise ProgramError(self.error) from self.error
            if name in self._deferred:
                raise RuntimeError(f"{name!r} is written when the speculative assistant turn ends; read it after")
            if name not in self.values:
                known = ", ".join(sorted(set(self.values) | set(self._events))) or "none"
                raise KeyError(f"no variable {name!r} in this program state (variables: {known})")
            return self.values[name]

    def fail(self, error: BaseException) -> None:
        """Release every reader: the stream will produce nothing more."""
        with self._lock:
            self.error = error
            events = list(self._events.values())
        for event in events:
            event.set()
