"""Helpers of the end-to-end suite: `sglang serve` subprocesses, SSE parsing, polling and the
OpenAI error-shape assertion."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

DEVICE = os.environ.get("SGLANG_TEST_DEVICE") or "cpu"
CPU_THREADS = os.environ.get("SGLANG_CPU_THREADS") or "1"
STARTUP_TIMEOUT_S = float(os.environ.get("SGLANG_E2E_STARTUP_TIMEOUT") or 300)
REQUEST_TIMEOUT_S = 120.0
"""Every client call of the suite has a timeout: a hang fails a test, it never stalls the run."""


def free_port() -> int:
    """A loopback port nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sglang_command() -> list[str]:
    """`sglang` of this interpreter's environment (the project's venv under pytest)."""
    script = Path(sys.executable).with_name("sglang")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from sglang.cli import main; sys.exit(main())"]


@dataclass
class ServerProcess:
    """One `sglang serve` subprocess; its output goes to `log_path`."""

    process: subprocess.Popen | None
    """None for a server this suite did not start (`$SGLANG_E2E_PORT`)."""
    port: int
    log_path: Path
    api_key: str | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def client(self, timeout: float = REQUEST_TIMEOUT_S) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, headers=self.headers(), timeout=timeout)

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def wait_ready(self, timeout: float = STARTUP_TIMEOUT_S) -> None:
        """Polls `/health` (open without the API key) until 200; fails with the log if the
        process exits or the deadline passes."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                if httpx.get(f"{self.base_url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"server not ready after {timeout:.0f} s:\n{self.log_tail()}")

    def stop(self, timeout: float = 60) -> int | None:
        """SIGTERM (a graceful drain), then SIGKILL if it outlives `timeout`; the exit code."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
        return self.process.returncode

    def server_info(self) -> dict[str, Any]:
        with self.client(timeout=30) as c:
            response = c.get("/get_server_info")
        response.raise_for_status()
        return response.json()


def start_server(log_dir: Path, *flags: str, api_key: str | None = None, wait: bool = True) -> ServerProcess:
    """Starts `sglang serve` on a free port with `flags` (and `--api-key` when given)."""
    port = free_port()
    log_path = log_dir / f"server-{port}.log"
    args = [*sglang_command(), "serve", "--device", DEVICE, "--port", str(port), *flags]
    if DEVICE == "cpu":
        args += ["--cpu-threads", CPU_THREADS]
    if api_key:
        args += ["--api-key", api_key]
    with open(log_path, "wb") as log:
        # Its own process group, so a kill after a failed drain takes the engine's children too.
        process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    server = ServerProcess(process, port, log_path, api_key)
    if wait:
        server.wait_ready()
    return server


def sse_events(lines: Iterator[str]) -> Iterator[Any]:
    """The `data:` payloads of a server-sent event stream, JSON-decoded; `[DONE]` as the string."""
    for line in lines:
        if not line.startswith("data:"):
            continue
        data = line[len("data:") :].strip()
        yield data if data == "[DONE]" else json.loads(data)


def wait_until(predicate: Callable[[], Any], timeout: float = 60, interval: float = 0.2) -> Any:
    """Polls `predicate` until it returns something truthy, which it returns; fails at the deadline."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout} s (last value: {last!r})")


def assert_openai_error(response: httpx.Response, status: int, param: str | None = None) -> dict[str, Any]:
    """`response` has `status` and an OpenAI-style error body (naming `param` when given)."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert {"message", "type", "param", "code"} <= set(error), error
    assert isinstance(error["message"], str) and error["message"], error
    assert isinstance(error["type"], str) and error["type"], error
    if param is not None:
        assert error["param"] == param or param in (error["param"] or "") or param in error["message"], error
    return error
