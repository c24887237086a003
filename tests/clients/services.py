"""Processes the client tests run on loopback: our `sglang serve`, and SGLang's routers.

Every process is started in its own process group, through a `Services` registry that stops all
of them (SIGTERM, then SIGKILL of the group) when the test or fixture that owns it ends, passed
or failed. Every address is 127.0.0.1; every wait has a deadline.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

HOST = "127.0.0.1"
DEVICE = os.environ.get("SGLANG_TEST_DEVICE") or "cpu"
CPU_THREADS = os.environ.get("SGLANG_CPU_THREADS") or "1"
"""On a shared 2-core machine one torch thread per server is faster than two that contend."""
STARTUP_TIMEOUT_S = float(os.environ.get("SGLANG_CLIENTS_STARTUP_TIMEOUT") or 300)
SERVER_KV_TOKENS = 8192


def free_port() -> int:
    """A loopback port nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


@dataclass
class Service:
    """One subprocess listening on a loopback port; its output goes to `log_path`."""

    name: str
    process: subprocess.Popen
    port: int
    log_path: Path
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def alive(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def get(self, path: str, timeout: float = 30) -> httpx.Response:
        return httpx.get(self.url + path, headers=self.headers, timeout=timeout)

    def wait_ready(self, path: str = "/health", timeout: float = STARTUP_TIMEOUT_S) -> None:
        """Polls `path` until 200; fails with the log's tail if the process exits or time runs out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"{self.name} exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                if self.get(path, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        raise RuntimeError(f"{self.name} not ready after {timeout:.0f} s:\n{self.log_tail()}")

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM (our server drains), then SIGKILL of the whole group if it outlives `timeout`."""
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout)
        self._kill_group()

    def kill(self) -> None:
        """A crash: SIGKILL to the process and every child, no drain."""
        self._kill_group()

    def _kill_group(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(10)


class Services:
    """Starts processes and remembers them, so that `close` stops every one."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.started: list[Service] = []

    def start(self, name: str, command: list[str], port: int, env: dict[str, str] | None = None,
              headers: dict[str, str] | None = None) -> Service:  # fmt: skip
        log_path = self.log_dir / f"{name}-{port}.log"
        with open(log_path, "wb") as log:
            # Its own process group: a kill takes the server's scheduler and detokenizer too.
            process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                cwd=self.log_dir, env={**os.environ, **(env or {})},
            )  # fmt: skip
        service = Service(name, process, port, log_path, dict(headers or {}))
        self.started.append(service)
        return service

    def close(self) -> None:
        for service in reversed(self.started):
            service.stop()


def sglang_command() -> list[str]:
    """`sglang` of this interpreter's environment (the project's venv under pytest)."""
    script = Path(sys.executable).with_name("sglang")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from sglang.cli import main; sys.exit(main())"]


def start_server(services: Services, *flags: str, api_key: str | None = None) -> Service:
    """Starts `sglang serve` (the embedded model) on a free loopback port; does not wait."""
    port = free_port()
    command = [*sglang_command(), "serve", "--device", DEVICE, "--host", HOST, "--port", str(port),
               "--max-total-tokens", str(SERVER_KV_TOKENS), "--log-level", "warning", *flags]  # fmt: skip
    if DEVICE == "cpu":
        command += ["--cpu-threads", CPU_THREADS]
    if api_key:
        command += ["--api-key", api_key]
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    return services.start("server", command, port, headers=headers)


def metric_total(service: Service, name: str) -> float:
    """The sum of every sample of Prometheus metric `name` (any labels) at `/metrics`."""
    response = service.get("/metrics")
    response.raise_for_status()
    total = 0.0
    for line in response.text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def finished_requests(server: Service) -> float:
    """Requests the server finished (upstream's counter, which the routers' dashboards read)."""
    return metric_total(server, "sglang:num_requests_total")


def sse_payloads(lines: Iterator[str]) -> Iterator[Any]:
    """The `data:` payloads of a server-sent event stream, JSON-decoded; `[DONE]` as the string."""
    for line in lines:
        if line.startswith("data:"):
            data = line[len("data:") :].strip()
            yield data if data == "[DONE]" else json.loads(data)


def wait_until(predicate: Callable[[], Any], timeout: float, interval: float = 0.25, what: str = "") -> Any:
    """Polls `predicate` until it returns something truthy, which it returns; fails at the deadline."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"{what or 'condition'} not met within {timeout:.0f} s (last: {last!r})")
