"""A prefill-decode pair of our servers behind smg, as the PD tests start it, and the requests
they compare: each is sent through smg (prefill and decode) and straight to one server in one
piece, greedy, and the outputs must be the same tokens."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from sglang.ci.servers import RunningServer, ServerGroup, free_port, serve_spec

from ..clients import routers
from ..clients.venvs import Venv

PREFILL_KV_TOKENS = 4096
DECODE_KV_TOKENS = 8192
"""Larger than the prefill's pool, so a prompt can fit the decode server and not the prefill."""
WAITING_TIMEOUT_S = 60
PROMPTS = (
    "The capital of France is",
    "Write a haiku about the sea.",
    "List three prime numbers and explain why each is prime:",
)
MAX_NEW_TOKENS = 16


@dataclass
class PDFleet:
    prefill: RunningServer
    decode: RunningServer
    bootstrap_port: int
    router: RunningServer | None = None

    def bootstrap(self, room: int) -> dict[str, Any]:
        return {"bootstrap_host": "127.0.0.1", "bootstrap_port": self.bootstrap_port, "bootstrap_room": room}


def start_pd_fleet(services: ServerGroup, smg_venv: Venv | None, decode_device: str = "cpu") -> PDFleet:
    bootstrap_port = free_port()
    prefill = services.launch(
        serve_spec(
            "--max-total-tokens",
            str(PREFILL_KV_TOKENS),
            "--disaggregation-mode",
            "prefill",
            "--disaggregation-bootstrap-port",
            str(bootstrap_port),
            device="cpu",
            name="prefill",
            log_level="warning",
        ),
        wait=False,
    )
    decode = services.launch(
        serve_spec(
            "--max-total-tokens",
            str(DECODE_KV_TOKENS),
            "--disaggregation-mode",
            "decode",
            device=decode_device,
            name="decode",
            log_level="warning",
            env={"SGLANG_DISAGGREGATION_WAITING_TIMEOUT": str(WAITING_TIMEOUT_S), "JAX_PLATFORMS": "cpu"},
        ),
        wait=False,
    )
    prefill.wait_ready()
    decode.wait_ready()
    fleet = PDFleet(prefill, decode, bootstrap_port)
    if smg_venv is not None:
        fleet.router = routers.start_pd_router(services, smg_venv, prefill.url, bootstrap_port, decode.url)
        fleet.router.wait_ready(timeout=60)
        routers.wait_for_workers(fleet.router, {prefill.url, decode.url})
    return fleet


def generate(
    server: RunningServer, text: str, sampling: dict[str, Any] | None = None, timeout: float = 120, **extra: Any
) -> dict[str, Any]:
    """`timeout`: the tpu platform on XLA:CPU compiles each new step shape, minutes under load."""
    params = {"max_new_tokens": MAX_NEW_TOKENS, "temperature": 0, **(sampling or {})}
    body = {"text": text, "sampling_params": params, **extra}
    response = httpx.post(f"{server.url}/generate", json=body, timeout=timeout)
    assert response.status_code == 200, response.text
    return response.json()


def chat(server: RunningServer, content: str) -> dict[str, Any]:
    body = {
        "model": server.model_name(),
        "messages": [{"role": "user", "content": content}],
        "max_tokens": MAX_NEW_TOKENS,
        "temperature": 0,
    }
    response = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=120)
    assert response.status_code == 200, response.text
    return response.json()


def kv_status(server: RunningServer) -> dict[str, int]:
    info = server.server_info()
    return {k: v for k, v in info.items() if k.startswith("kv_") or k.startswith("num_")}


def assert_pool_full(server: RunningServer) -> None:
    """Nothing holds KV: once the prefix cache is flushed, every slot is free."""
    assert httpx.post(f"{server.url}/flush_cache", timeout=30).status_code == 200
    status = kv_status(server)
    assert status["kv_tokens_free"] == status["kv_tokens_total"], status
    assert status["num_running_requests"] == status["num_waiting_requests"] == 0, status
