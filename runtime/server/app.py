"""The FastAPI application: cross-cutting behaviour around the native and OpenAI routers.

In order, for every request: a request id (the client's `X-Request-Id` or a new one) is set on
the response; with `--api-key`, a missing or wrong key gets 401 before anything else is read;
while draining (SIGTERM/SIGINT), new work gets 503; a body over `--max-request-bytes` gets 413,
from its Content-Length before any of it is read, or as soon as the bytes read pass the limit
(a chunked body), so no handler parses or tokenizes it. Errors become bodies in the shape of the
API the path belongs to (`error_shape`: Anthropic's under /v1/messages, Ollama's under /api/,
OpenAI's elsewhere): bad JSON or schema violations 400, `ApiError` and FastAPI's own HTTP errors
(an undecodable body, an unknown route) their own status, anything else 500 (and a log line).
Under /v1/messages the key may also come as `x-api-key`, as Anthropic's clients send it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
import uuid

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.datastructures import Headers, MutableHeaders
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sglang.runtime.observability import request_stamps
from sglang.runtime.server.anthropic import ANTHROPIC_PREFIX, anthropic_error_body, anthropic_router
from sglang.runtime.server.embedding_api import router as embedding_router
from sglang.runtime.server.errors import ApiError, ErrorShape, error_body, error_response, json_response
from sglang.runtime.server.health_api import router as health_router
from sglang.runtime.server.info_api import router as info_router
from sglang.runtime.server.logging_api import router as logging_router
from sglang.runtime.server.lora_api import router as lora_router
from sglang.runtime.server.native_api import router as native_router
from sglang.runtime.server.ollama import OLLAMA_PREFIX, ollama_error_body, ollama_router
from sglang.runtime.server.openai import openai_router
from sglang.runtime.server.parsers_api import router as parsers_router
from sglang.runtime.server.responses_api import responses_router
from sglang.runtime.server.sessions_api import router as sessions_router
from sglang.runtime.server.state import ServerState
from sglang.runtime.server.weights_api import router as weights_router

logger = logging.getLogger("sglang.server")

OPEN_PATHS = frozenset({"/health", "/ping", "/ready", "/metrics"})
"""Probes and scrapes work without the API key, as load balancers and Prometheus expect.
(`/health_generate` is not among them: it runs a generation.)"""


ERROR_SHAPES: tuple[tuple[str, ErrorShape], ...] = (
    (ANTHROPIC_PREFIX, anthropic_error_body),
    (OLLAMA_PREFIX, ollama_error_body),
)


def error_shape(path: str) -> ErrorShape:
    """The error body shape of the API `path` belongs to."""
    return next((shape for prefix, shape in ERROR_SHAPES if path.startswith(prefix)), error_body)


def _validation_message(error: RequestValidationError) -> tuple[str, str | None]:
    first = error.errors()[0] if error.errors() else {}
    location = [str(p) for p in first.get("loc", ()) if p != "body"]
    param = ".".join(location) or None
    return f"{first.get('msg', 'invalid request')}" + (f" ({param})" if param else ""), param


def create_app(state: ServerState) -> FastAPI:
    app = FastAPI(title="sglang", version="0.1.0")
    app.state.server = state
    state.metrics()

    app.add_middleware(RequestFrame, state=state)

    @app.exception_handler(ApiError)
    async def on_api_error(request: Request, error: ApiError) -> Response:
        return error_response(error, error_shape(request.url.path))

    @app.exception_handler(StarletteHTTPException)
    async def on_http_exception(request: Request, error: StarletteHTTPException) -> Response:
        # FastAPI's own refusals (a body it cannot decode, an unknown route or method), in our shape.
        body = error_shape(request.url.path)(error.status_code, str(error.detail))
        return json_response(body, error.status_code, error.headers)

    @app.exception_handler(RequestValidationError)
    async def on_validation_error(request: Request, error: RequestValidationError) -> Response:
        message, param = _validation_message(error)
        return json_response(error_shape(request.url.path)(400, message, param), 400)

    @app.exception_handler(Exception)
    async def on_unexpected(request: Request, error: Exception) -> Response:
        logger.exception("unhandled error in %s %s", request.method, request.url.path)
        return json_response(error_shape(request.url.path)(500, f"internal error: {type(error).__name__}", None), 500)

    # Matched in order, one by one: the generation routes first (no two routers share a path).
    app.include_router(openai_router)
    app.include_router(native_router)
    app.include_router(responses_router)
    app.include_router(health_router)
    app.include_router(anthropic_router)
    app.include_router(ollama_router)
    app.include_router(info_router)
    app.include_router(lora_router)
    app.include_router(parsers_router)
    app.include_router(embedding_router)
    app.include_router(weights_router)
    app.include_router(sessions_router)
    app.include_router(logging_router)
    return app


class RequestFrame:
    """The per-request frame above as a pure ASGI middleware, which also cancels a handler whose
    client left before its response began. (Starlette's `@app.middleware` wraps `receive`, so
    `request.is_disconnected()` never turns true behind it.)"""

    def __init__(self, app: ASGIApp, state: ServerState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        request_id = headers.get("x-request-id") or uuid.uuid4().hex
        started = time.monotonic()
        path, args = scope["path"], self.state.args
        shape = error_shape(path)
        status = 500
        stamps = request_stamps.STAMPS
        clock = None
        if stamps is not None:  # the tokenizer manager ties this request's engine ids to it
            clock = request_stamps.HttpClock(time.monotonic_ns())
            request_stamps.HTTP_CLOCK.set(clock)

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                MutableHeaders(scope=message)["X-Request-Id"] = request_id
            elif clock is not None and stamps is not None and message.get("body"):
                clock.body_sent(stamps)
            await send(message)

        app: ASGIApp = self.app
        if args.api_key and path.rstrip("/") not in OPEN_PATHS and not _authorized(headers, args.api_key, path):
            app = error_response(ApiError(401, "missing or invalid API key"), shape)
        elif self.state.draining and scope["method"] == "POST":
            app = error_response(ApiError(503, "the server is shutting down", headers={"Retry-After": "5"}), shape)
        elif _declared_length(headers) > args.max_request_bytes:
            app = error_response(_too_large(args.max_request_bytes), shape)
        try:
            if not await _run_unless_client_leaves(app, scope, receive, send_with_id, args.max_request_bytes, shape):
                status = 499  # the client went away before the response began; its work was cancelled
        finally:
            if self.state.log_requests:
                logger.info(
                    "%s %s %s -> %d in %.3f s", request_id, scope["method"], path, status, time.monotonic() - started
                )


def _declared_length(headers: Headers) -> int:
    try:
        return int(headers.get("content-length", "0"))
    except ValueError:
        return 0  # uvicorn refuses a malformed Content-Length itself


def _too_large(limit: int) -> ApiError:
    return ApiError(413, f"the request body is over {limit} bytes (--max-request-bytes)")


async def _run_unless_client_leaves(
    app: ASGIApp, scope: Scope, receive: Receive, send: Send, max_body: int, shape: ErrorShape
) -> bool:
    """Runs `app`, cancelling it if the client disconnects after sending its body and before the
    response begins: a non-streaming handler's generation is then aborted (its KV freed) on any
    route. Once the response has begun, streaming responses watch for the disconnect themselves.
    False if it was cancelled so. A body whose bytes pass `max_body` (one without a
    Content-Length) stops being read: the handler is cancelled and the client gets 413."""
    body_read = asyncio.Event()
    too_large = asyncio.Event()
    response_began = asyncio.Event()
    received = 0

    async def tracking_receive() -> Message:
        nonlocal received
        message = await receive()
        if message["type"] == "http.request":
            received += len(message.get("body", b""))
            if received > max_body:
                too_large.set()
                await asyncio.Event().wait()  # until cancelled: the handler never sees the body
        if message["type"] != "http.request" or not message.get("more_body", False):
            body_read.set()
        return message

    async def tracking_send(message: Message) -> None:
        if message["type"] == "http.response.start":
            response_began.set()
        await send(message)

    async def client_left_early() -> bool:
        await body_read.wait()
        while (await receive())["type"] != "http.disconnect":
            pass
        return not response_began.is_set()

    handler = asyncio.ensure_future(app(scope, tracking_receive, tracking_send))
    watcher = asyncio.ensure_future(client_left_early())
    overflow = asyncio.ensure_future(too_large.wait())
    try:
        await asyncio.wait({handler, watcher, overflow}, return_when=asyncio.FIRST_COMPLETED)
        if overflow.done() and not handler.done():
            handler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await handler
            if not response_began.is_set():
                await error_response(_too_large(max_body), shape)(scope, receive, send)
            return True
        if handler.done() or not watcher.result():
            await handler
            return True
        handler.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await handler
        return False
    finally:
        watcher.cancel()
        overflow.cancel()
        handler.cancel()


def _authorized(headers: Headers, api_key: str, path: str) -> bool:
    # As bytes: compare_digest refuses str with non-ASCII characters (a header may carry any).
    if path.startswith(ANTHROPIC_PREFIX) and "x-api-key" in headers:
        return secrets.compare_digest(headers["x-api-key"].strip().encode(), api_key.encode())
    scheme, _, token = headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and secrets.compare_digest(token.strip().encode(), api_key.encode())
