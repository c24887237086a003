"""The FastAPI application: cross-cutting behaviour around the native and OpenAI routers.

In order, for every request: a request id (the client's `X-Request-Id` or a new one) is set on
the response; with `--api-key`, a missing or wrong key gets 401 before anything else is read;
while draining (SIGTERM/SIGINT), new work gets 503. Errors become OpenAI-style bodies: bad
JSON or schema violations 400, `ApiError` its own status, anything else 500 (and a log line).
"""

from __future__ import annotations

import logging
import secrets
import time
import uuid

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response

from sglang.runtime.server.errors import ApiError, error_body, error_response, json_response
from sglang.runtime.server.metrics import ServerMetrics
from sglang.runtime.server.native_api import router as native_router
from sglang.runtime.server.openai import openai_router
from sglang.runtime.server.state import ServerState

logger = logging.getLogger("sglang.server")

OPEN_PATHS = ("/health", "/metrics")
"""Probes and scrapes work without the API key, as load balancers and Prometheus expect."""


def _validation_message(error: RequestValidationError) -> tuple[str, str | None]:
    first = error.errors()[0] if error.errors() else {}
    location = [str(p) for p in first.get("loc", ()) if p != "body"]
    param = ".".join(location) or None
    return f"{first.get('msg', 'invalid request')}" + (f" ({param})" if param else ""), param


def create_app(state: ServerState) -> FastAPI:
    app = FastAPI(title="sglang", version="0.1.0")
    app.state.server = state
    metrics = state.extras.setdefault("metrics", ServerMetrics())
    state.manager.finish_observers.append(metrics.observe_finished)

    @app.middleware("http")
    async def frame(request: Request, call_next) -> Response:
        request_id = request.headers.get("x-request-id") or uuid.uuid4().hex
        started = time.monotonic()
        path = request.url.path
        if state.args.api_key and not path.startswith(OPEN_PATHS) and not _authorized(request, state.args.api_key):
            response: Response = error_response(ApiError(401, "missing or invalid API key"))
        elif state.draining and request.method == "POST":
            response = error_response(ApiError(503, "the server is shutting down", headers={"Retry-After": "5"}))
        else:
            response = await call_next(request)
        response.headers["X-Request-Id"] = request_id
        if state.args.log_requests:
            logger.info(
                "%s %s %s -> %d in %.3f s", request_id, request.method, path, response.status_code,
                time.monotonic() - started,
            )  # fmt: skip
        return response

    @app.exception_handler(ApiError)
    async def on_api_error(_: Request, error: ApiError) -> Response:
        return error_response(error)

    @app.exception_handler(RequestValidationError)
    async def on_validation_error(_: Request, error: RequestValidationError) -> Response:
        message, param = _validation_message(error)
        return json_response(error_body(400, message, param), 400)

    @app.exception_handler(Exception)
    async def on_unexpected(request: Request, error: Exception) -> Response:
        logger.exception("unhandled error in %s %s", request.method, request.url.path)
        return json_response(error_body(500, f"internal error: {type(error).__name__}"), 500)

    app.include_router(native_router)
    app.include_router(openai_router)
    return app


def _authorized(request: Request, api_key: str) -> bool:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    return scheme.lower() == "bearer" and secrets.compare_digest(token.strip(), api_key)
