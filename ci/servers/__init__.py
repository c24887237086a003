"""The one launcher of test and benchmark servers: every suite, test folder and benchmark starts
its `sglang serve` (or a peer server, or a router) through here.

- `spec`: `LaunchSpec`, what to start (command line, loopback port, environment, API key,
  readiness probes, startup deadline), `serve_spec` for our own `sglang serve`, and the one
  set of environment variables (`$SGLANG_TEST_DEVICE`, `$SGLANG_CPU_THREADS`,
  `$SGLANG_TEST_STARTUP_TIMEOUT`);
- `running`: `RunningServer`, a started process: readiness, log tail, clients, stop and kill;
- `launcher`: `launch`, `launched` and `ServerGroup`, which start processes so that each one is
  always reaped;
- `observe`: reading a server from a test: SSE streams, a streamed /generate in a thread, polling.

It imports nothing heavier than httpx, so a benchmark can use it without torch.
"""

from sglang.ci.servers.launcher import ServerGroup, launch, launched
from sglang.ci.servers.observe import DONE, GenerateStream, sse_events, sse_payload, wait_until
from sglang.ci.servers.running import RunningServer
from sglang.ci.servers.spec import (
    CPU_THREADS,
    DEVICE,
    HOST,
    REQUEST_TIMEOUT_S,
    STARTUP_TIMEOUT_S,
    LaunchSpec,
    free_port,
    serve_spec,
    sglang_command,
)

__all__ = [
    "CPU_THREADS",
    "DEVICE",
    "DONE",
    "HOST",
    "REQUEST_TIMEOUT_S",
    "STARTUP_TIMEOUT_S",
    "GenerateStream",
    "LaunchSpec",
    "RunningServer",
    "ServerGroup",
    "free_port",
    "launch",
    "launched",
    "serve_spec",
    "sglang_command",
    "sse_events",
    "sse_payload",
    "wait_until",
]
