"""What to start: `LaunchSpec` (a command line listening on one loopback port), `serve_spec`
for our own `sglang serve`, and the environment variables every suite and benchmark reads.

- `$SGLANG_TEST_DEVICE`: the device our servers run on (default cpu);
- `$SGLANG_CPU_THREADS`: torch threads of a cpu server (default one: on a shared 2-core machine
  one thread is several times faster than two that contend with other processes);
- `$SGLANG_TEST_STARTUP_TIMEOUT`: seconds a server may take to become ready (default 300), the
  one startup deadline of every suite.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

HOST = "127.0.0.1"
"""Every server a test or benchmark starts binds loopback only."""
DEVICE = os.environ.get("SGLANG_TEST_DEVICE") or "cpu"
CPU_THREADS = int(os.environ.get("SGLANG_CPU_THREADS") or 1)
STARTUP_TIMEOUT_S = float(os.environ.get("SGLANG_TEST_STARTUP_TIMEOUT") or 300)
REQUEST_TIMEOUT_S = 120.0
"""Every client call of a suite has a timeout: a hang fails a test, it never stalls the run."""


def free_port() -> int:
    """A loopback port nothing listens on right now (the OS picks it, so parallel runs differ)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def sglang_command() -> list[str]:
    """`sglang` of this interpreter's environment (the project's venv under pytest)."""
    script = Path(sys.executable).with_name("sglang")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from sglang.cli import main; sys.exit(main())"]


@dataclass(frozen=True)
class LaunchSpec:
    """One server to start: `argv` listens on `HOST:port`.

    Readiness means `health_path` answered 200 and then `model_path` answered 200 listing at
    least one model (with the API key when there is one). `model_path` is None only for a
    process that serves no model of its own (a router, whose workers the caller waits for).
    """

    argv: tuple[str, ...]
    port: int
    name: str = "server"
    """Names the log file (`NAME-PORT.log`) and the process in errors."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Set on top of this process's environment."""
    api_key: str | None = None
    health_path: str = "/health"
    model_path: str | None = "/v1/models"
    startup_timeout_s: float = STARTUP_TIMEOUT_S
    cwd: Path | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


def serve_spec(
    *flags: str,
    device: str = DEVICE,
    api_key: str | None = None,
    env: Mapping[str, str] | None = None,
    name: str = "server",
    cpu_threads: int | None = CPU_THREADS,
    log_level: str | None = None,
    startup_timeout_s: float = STARTUP_TIMEOUT_S,
) -> LaunchSpec:
    """`sglang serve` (the embedded model unless `flags` name another) on a free loopback port.

    `cpu_threads` applies on cpu only; None leaves torch's choice. `log_level` None keeps the
    server's default (its startup log carries the op table, which some tests read).
    """
    port = free_port()
    argv = [*sglang_command(), "serve", "--device", device, "--host", HOST, "--port", str(port)]
    if device == "cpu" and cpu_threads is not None:
        argv += ["--cpu-threads", str(cpu_threads)]
    if log_level is not None:
        argv += ["--log-level", log_level]
    if api_key:
        argv += ["--api-key", api_key]
    argv += flags
    return LaunchSpec(
        tuple(argv), port, name=name, env=dict(env or {}), api_key=api_key, startup_timeout_s=startup_timeout_s
    )
