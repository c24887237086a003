"""Reading a server from a test or benchmark: server-sent event payloads, a streamed /generate
in a thread of its own, and polling until a condition holds (every wait has a deadline)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sglang.ci.servers.running import RunningServer

DONE = "[DONE]"
"""The OpenAI stream's last payload, returned as this string rather than decoded."""


def sse_payload(line: str) -> Any | None:
    """The JSON-decoded payload of one `data:` line (`DONE` as the string); None for any other
    line (blank separators, comments, `event:` fields)."""
    if not line.startswith("data:"):
        return None
    data = line[len("data:") :].strip()
    return data if data == DONE else json.loads(data)


def sse_events(lines: Iterable[str]) -> Iterator[Any]:
    """The `data:` payloads of a server-sent event stream, in order."""
    for line in lines:
        payload = sse_payload(line)
        if payload is not None:
            yield payload


class GenerateStream(threading.Thread):
    """A streamed /generate on a client of its own, in a thread: `outputs` collects its events,
    `started` is set at the first."""

    def __init__(self, server: RunningServer, body: dict[str, Any]) -> None:
        super().__init__()
        self.server, self.body = server, body
        self.started = threading.Event()
        self.outputs: list[dict[str, Any]] = []

    def run(self) -> None:
        with self.server.client() as client, client.stream("POST", "/generate", json=self.body) as response:
            for event in sse_events(response.iter_lines()):
                if isinstance(event, dict):
                    self.outputs.append(event)
                    self.started.set()


def wait_until(predicate: Callable[[], Any], timeout: float = 60, interval: float = 0.2, what: str = "") -> Any:
    """Polls `predicate` until it returns something truthy, which it returns; fails at the deadline
    with the last value seen."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"{what or 'condition'} not met within {timeout:.0f} s (last value: {last!r})")
