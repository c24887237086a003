"""SGLang's routers, `smg` and `sglang-router`, started from their venvs in front of our servers.

Both install a script named `smg` with the same `launch` command line; their defaults bind
0.0.0.0 and a fixed Prometheus port, so every address and port is given here (loopback, free).
"""

from __future__ import annotations

from typing import Any

import httpx

from sglang.ci.servers import HOST, LaunchSpec, RunningServer, ServerGroup, free_port, wait_until

from .venvs import Venv

HEALTH_CHECK_INTERVAL_S = 1
"""The routers' default is 60 s; a dead worker must leave rotation within a test's patience."""


def start_router(
    services: ServerGroup, venv: Venv, name: str, worker_urls: list[str], policy: str, *extra: str
) -> RunningServer:
    return _launch(services, venv, name, "--worker-urls", *worker_urls, "--policy", policy, *extra)


def start_pd_router(
    services: ServerGroup, venv: Venv, prefill_url: str, bootstrap_port: int, decode_url: str
) -> RunningServer:
    """smg in prefill-decode mode in front of one prefill and one decode server."""
    pd = ("--pd-disaggregation", "--prefill", prefill_url, str(bootstrap_port), "--decode", decode_url)
    return _launch(services, venv, "smg-pd", *pd, "--policy", "round_robin")


def _launch(services: ServerGroup, venv: Venv, name: str, *workers: str) -> RunningServer:
    port = free_port()
    command = [
        str(venv.script("smg")),
        "launch",
        "--host",
        HOST,
        "--port",
        str(port),
        "--prometheus-host",
        HOST,
        "--prometheus-port",
        str(free_port()),
        *workers,
        "--health-check-interval-secs",
        str(HEALTH_CHECK_INTERVAL_S),
        "--health-failure-threshold",
        "1",
        "--log-level",
        "warn",
    ]
    # RUST_LOG would override --log-level; the router's own flag decides. No model of its own:
    # the caller waits for its workers (`wait_for_workers`).
    spec = LaunchSpec(tuple(command), port, name=name, env={"RUST_LOG": ""}, model_path=None, cwd=services.log_dir)
    return services.launch(spec, wait=False)


def workers(router: RunningServer) -> list[dict[str, Any]]:
    """smg's `GET /workers` list (url, is_healthy, status, ...)."""
    response = router.get("/workers", timeout=10)
    response.raise_for_status()
    return response.json()["workers"]


def healthy_worker_urls(router: RunningServer) -> set[str]:
    try:
        return {w["url"] for w in workers(router) if w.get("is_healthy")}
    except httpx.HTTPError:
        return set()


def wait_for_workers(router: RunningServer, urls: set[str], timeout: float = 60) -> None:
    """Waits until exactly `urls` are the router's healthy workers."""
    wait_until(lambda: healthy_worker_urls(router) == urls, timeout, what=f"{router.name} healthy workers == {urls}")
