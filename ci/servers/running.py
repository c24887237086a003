"""A started server: `RunningServer`, its readiness, log tail, clients and stop."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from sglang.ci.servers.spec import REQUEST_TIMEOUT_S, LaunchSpec

POLL_INTERVAL_S = 0.25
PROBE_TIMEOUT_S = 5.0
"""One readiness probe's own timeout: a server still loading may accept and not answer yet."""
STOP_GRACE_S = 60.0
"""How long `stop` waits for a graceful drain before it kills the process group."""


@dataclass
class RunningServer:
    """One server process started from `spec`, in its own process group, its output in `log_path`.

    Invariants: `process` is None only for a server this run did not start (`attach`), which
    is never stopped here; a server whose readiness fails is stopped, its whole process group
    with it, before the error is raised, and every startup error carries the tail of its log.
    """

    spec: LaunchSpec
    process: subprocess.Popen[bytes] | None
    log_path: Path | None

    @classmethod
    def attach(cls, port: int, api_key: str | None = None) -> RunningServer:
        """A server already listening on loopback `port` (started by someone else)."""
        return cls(LaunchSpec((), port, name="external", api_key=api_key), None, None)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def port(self) -> int:
        return self.spec.port

    @property
    def url(self) -> str:
        return self.spec.url

    @property
    def api_key(self) -> str | None:
        return self.spec.api_key

    @property
    def headers(self) -> dict[str, str]:
        """The API key's header (empty without a key)."""
        return self.spec.headers

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, chars: int = 4000) -> str:
        if self.log_path is None:
            return ""
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def client(self, timeout: float = REQUEST_TIMEOUT_S) -> httpx.Client:
        """A client on this server that sends the API key."""
        return httpx.Client(base_url=self.url, headers=self.headers, timeout=timeout)

    def get(self, path: str, timeout: float = 30) -> httpx.Response:
        return httpx.get(self.url + path, headers=self.headers, timeout=timeout)

    def wait_ready(self, timeout: float | None = None) -> None:
        """Polls the spec's health path until 200, then its model path until it lists a model.
        Fails with the log's tail, after stopping the server, if the process exits or the
        deadline (the spec's startup timeout unless `timeout`) passes."""
        timeout = self.spec.startup_timeout_s if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while not self._answers(self.spec.health_path) or not self._lists_a_model():
            if self.process is not None and self.process.poll() is not None:
                self.kill()  # children it left behind (its group) go with it
                raise RuntimeError(f"{self.name} exited with {self.process.returncode}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{self.name} not ready after {timeout:.0f} s:\n{self.log_tail()}")
            time.sleep(POLL_INTERVAL_S)

    def _answers(self, path: str) -> httpx.Response | None:
        try:
            response = self.get(path, timeout=PROBE_TIMEOUT_S)
        except httpx.HTTPError:
            return None
        return response if response.status_code == 200 else None

    def _lists_a_model(self) -> bool:
        if self.spec.model_path is None:
            return True
        response = self._answers(self.spec.model_path)
        with contextlib.suppress(ValueError, KeyError, TypeError):
            return response is not None and len(response.json()["data"]) > 0
        return False

    def model_name(self) -> str:
        """The first model `/v1/models` lists (the name OpenAI bodies carry)."""
        response = self.get("/v1/models")
        response.raise_for_status()
        return response.json()["data"][0]["id"]

    def server_info(self) -> dict[str, Any]:
        response = self.get("/get_server_info")
        response.raise_for_status()
        return response.json()

    def metric_total(self, name: str) -> float:
        """The sum of every sample of Prometheus metric `name` (any labels) at `/metrics`."""
        response = self.get("/metrics")
        response.raise_for_status()
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in response.text.splitlines()
            if line.startswith(name + "{") or line.startswith(name + " ")
        )

    def stop(self, timeout: float = STOP_GRACE_S) -> int | None:
        """SIGTERM (our server drains), then SIGKILL of the whole group if it outlives `timeout`,
        and of any child left behind; the exit code (None for an attached server)."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout)
        self.kill()
        return self.process.returncode

    def kill(self) -> None:
        """A crash: SIGKILL to the process and every child, no drain; then reaped."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(10)
