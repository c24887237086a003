"""Probes, as upstream answers them: `/health` (the engine is alive), `/health_generate` (a
one-token generation completes), `/ping` (SageMaker's health check: alive and not shutting
down; a paused server still passes, so that a weight sync does not get it replaced) and `/ready`
(a readiness probe: alive, not shutting down, not paused by `/pause_generation`).

`/health`, `/ping` and `/ready` answer from flags the HTTP process holds (probes time out after
a second or two); a failing one is a 503 whose error says why. They need no API key.
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from sglang.runtime.processes.tokenizer_manager import last_item
from sglang.runtime.requests.generate_input import GenerateInput
from sglang.runtime.server.errors import ApiError
from sglang.runtime.server.state import ServerState, server_state

router = APIRouter()


def _check_alive(state: ServerState) -> None:
    if state.manager.dead_reason is not None:
        raise ApiError(503, f"unhealthy: the engine died ({state.manager.dead_reason}); the server exits with status 1")


def _check_serving(state: ServerState) -> None:
    _check_alive(state)
    if state.draining:
        raise ApiError(503, "the server is shutting down")


@router.get("/health")
async def health(request: Request) -> Response:
    _check_alive(server_state(request))
    return Response(status_code=200)


def health_probe() -> GenerateInput:
    """The request a health check runs: one greedy token, left out of the metrics."""
    return GenerateInput(input_ids=[0], sampling_params={"max_new_tokens": 1, "temperature": 0}, log_metrics=False)


@router.get("/health_generate")
async def health_generate(request: Request) -> Response:
    """Healthy only if a one-token generation completes."""
    state = server_state(request)
    try:
        await last_item(state.manager.generate(health_probe()))
    except Exception as e:
        raise ApiError(503, f"unhealthy: {e}") from None
    return Response(status_code=200)


@router.get("/ping")
async def ping(request: Request) -> Response:
    _check_serving(server_state(request))
    return Response(status_code=200)


@router.get("/ready")
async def ready(request: Request) -> Response:
    state = server_state(request)
    _check_serving(state)
    if state.paused:
        raise ApiError(503, "not ready: generation is paused (/pause_generation) until /continue_generation")
    return Response(status_code=200)
