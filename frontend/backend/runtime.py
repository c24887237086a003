"""`sgl.Runtime(...)`: start a server subprocess and use it through a `RuntimeEndpoint`.

Keyword arguments become server flags (`model_path="m"` -> `--model-path m`; `True` -> a bare
flag; `False`/None -> omitted; a list -> the flag followed by its items). The server's output goes
to a log file whose tail is in the error if the server exits or does not become healthy in time.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

import httpx

from sglang.frontend.backend.runtime_endpoint import RuntimeEndpoint


def server_flags(args: dict[str, Any]) -> list[str]:
    flags: list[str] = []
    for key, value in args.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            flags.append(flag)
        elif isinstance(value, (list, tuple)):
            flags += [flag, *map(str, value)]
        elif isinstance(value, dict):
            flags += [flag, json.dumps(value)]
        else:
            flags += [flag, str(value)]
    return flags


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class Runtime:
    server_module = "sglang.launch_server"

    def __init__(
        self,
        model_path: str | None = None,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        log_level: str = "error",
        launch_timeout: float = 300.0,
        api_key: str | None = None,
        chat_template_name: str | None = None,
        **server_args: Any,
    ):
        port = port or _free_port(host)
        self.url = f"http://{host}:{port}"
        args = {"model_path": model_path, "host": host, "port": port, "log_level": log_level, "api_key": api_key}
        command = [sys.executable, "-m", self.server_module, *server_flags({**args, **server_args})]
        self._log = tempfile.NamedTemporaryFile(prefix="sglang-runtime-", suffix=".log", delete=False)  # noqa: SIM115
        self.process: subprocess.Popen | None = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT)
        try:
            self._wait_healthy(launch_timeout, api_key)
            self.endpoint = RuntimeEndpoint(self.url, api_key=api_key, chat_template_name=chat_template_name)
        except BaseException:
            self.shutdown()
            raise

    def _wait_healthy(self, timeout: float, api_key: str | None) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                raise RuntimeError(f"the server exited while starting:\n{self._log_tail()}")
            try:
                if httpx.get(f"{self.url}/health", headers=headers, timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass  # not listening yet
            time.sleep(0.5)
        raise TimeoutError(f"the server at {self.url} was not healthy after {timeout:.0f}s:\n{self._log_tail()}")

    def _log_tail(self, chars: int = 4000) -> str:
        with open(self._log.name, errors="replace") as f:
            return f.read()[-chars:]

    def generate(self, prompt: str | list[str], sampling_params: dict[str, Any] | None = None, **kwargs: Any) -> str:
        """POST /generate; returns the response as JSON text, as upstream's `Runtime.generate` does."""
        body = {"text": prompt, "sampling_params": sampling_params or {}, **kwargs}
        return json.dumps(self.endpoint.http.post("/generate", body))

    def cache_prefix(self, prefix: str) -> None:
        self.endpoint.cache_prefix(prefix)

    def flush_cache(self) -> None:
        self.endpoint.flush_cache()

    def get_server_info(self) -> dict[str, Any]:
        return self.endpoint.get_server_info()

    def shutdown(self) -> None:
        endpoint = getattr(self, "endpoint", None)
        if endpoint is not None:
            endpoint.shutdown()
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *_: Any) -> None:
        self.shutdown()

    def __del__(self) -> None:
        if getattr(self, "process", None) is not None:
            self.shutdown()
