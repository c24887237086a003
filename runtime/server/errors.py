"""Errors as HTTP responses, in the OpenAI error shape every client of ours can parse:

    {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}

`type` follows OpenAI (`invalid_request_error`, `authentication_error`, `not_found_error`,
`server_overloaded`, `server_error`); `code` is the HTTP status.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
from fastapi.responses import Response

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    409: "conflict_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    503: "server_overloaded",
    500: "server_error",
}


class ApiError(Exception):
    """Raised by handlers; the app turns it into the response below."""

    def __init__(self, status: int, message: str, param: str | None = None, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.headers = headers or {}


ErrorShape = Callable[[int, str, str | None], Any]
"""(status, message, param) -> an error body in one API's own shape. OpenAI's (`error_body`)
is the default; the Anthropic and Ollama routes have their own, chosen by path in the app."""


def error_body(status: int, message: str, param: str | None = None) -> dict[str, Any]:
    return {
        "error": {
            "message": message,
            "type": ERROR_TYPES.get(status, "server_error"),
            "param": param,
            "code": status,
        }
    }


def json_response(payload: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(payload), status, headers=headers, media_type="application/json")


def error_response(error: ApiError, shape: ErrorShape = error_body) -> Response:
    return json_response(shape(error.status, error.message, error.param), error.status, error.headers)


def as_api_error(error: Exception) -> ApiError | None:
    """The HTTP meaning of an exception raised by the tokenizer manager, or None if it has none
    (a bug: the app answers 500 and logs it)."""
    from sglang.runtime.processes.tokenizer_manager import EngineDeadError, QueueFullError
    from sglang.runtime.requests.generate_input import InvalidRequestError

    if isinstance(error, ApiError):
        return error
    if isinstance(error, InvalidRequestError):
        return ApiError(400, str(error), error.param)
    if isinstance(error, QueueFullError):
        return ApiError(503, str(error), headers={"Retry-After": "1"})
    if isinstance(error, EngineDeadError):
        return ApiError(503, f"the engine is not running: {error}")
    return None
