"""Starting servers so that each one is always reaped: `launch`, `launched`, `ServerGroup`."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType

from sglang.ci.servers.running import RunningServer
from sglang.ci.servers.spec import LaunchSpec


def launch(spec: LaunchSpec, log_dir: Path, *, wait: bool = True) -> RunningServer:
    """Starts `spec` in its own process group (so a kill takes the engine's children too), its
    output in `log_dir/NAME-PORT.log`; with `wait`, returns only once it is ready (a server that
    never gets ready is stopped, and the error carries its log tail). The caller stops it:
    prefer `launched` or a `ServerGroup`, which always do."""
    log_path = log_dir / f"{spec.name}-{spec.port}.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            list(spec.argv),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=spec.cwd,
            env={**os.environ, **spec.env},
        )
    server = RunningServer(spec, process, log_path)
    if wait:
        server.wait_ready()
    return server


@contextmanager
def launched(spec: LaunchSpec, log_dir: Path) -> Iterator[RunningServer]:
    """A ready server for the length of the block; stopped when it ends, however it ends."""
    server = launch(spec, log_dir, wait=False)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


class ServerGroup:
    """Starts servers and remembers them, so that `close` stops every one (the last started
    first: a router goes before its workers). Use it as a context manager or from a fixture's
    `finally`, so that a failed test still reaps its processes."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.started: list[RunningServer] = []

    def launch(self, spec: LaunchSpec, *, wait: bool = True) -> RunningServer:
        """`launch`, remembered even if it never gets ready. With `wait=False` several servers
        load side by side; call `wait_ready` on each before use."""
        server = launch(spec, self.log_dir, wait=False)
        self.started.append(server)
        if wait:
            server.wait_ready()
        return server

    def close(self) -> None:
        for server in reversed(self.started):
            server.stop()

    def __enter__(self) -> ServerGroup:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()
