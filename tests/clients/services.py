"""Our `sglang serve` as the client tests run it: the embedded model on a free loopback port,
started through the one launcher (`sglang.ci.servers`) into the module's `ServerGroup`, which
stops every process (SIGTERM, then SIGKILL of its group) when the module ends, passed or failed.
"""

from __future__ import annotations

from sglang.ci.servers import RunningServer, ServerGroup, serve_spec

SERVER_KV_TOKENS = 8192
FINISHED_REQUESTS_METRIC = "sglang:num_requests_total"
"""Requests a server finished: upstream's counter, which the routers' dashboards read."""


def start_server(services: ServerGroup, *flags: str, api_key: str | None = None) -> RunningServer:
    """Starts `sglang serve` with the client tests' defaults; does not wait (servers load side by
    side), so call `wait_ready` before use."""
    spec = serve_spec("--max-total-tokens", str(SERVER_KV_TOKENS), *flags, api_key=api_key, log_level="warning")
    return services.launch(spec, wait=False)


def finished_requests(server: RunningServer) -> float:
    return server.metric_total(FINISHED_REQUESTS_METRIC)
