"""The OpenAI error shape every refusal of the OpenAI API must have, as one assertion."""

from __future__ import annotations

from typing import Any

import httpx


def assert_openai_error(response: httpx.Response, status: int, param: str | None = None) -> dict[str, Any]:
    """`response` has `status` and an OpenAI-style error body (naming `param` when given)."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert {"message", "type", "param", "code"} <= set(error), error
    assert isinstance(error["message"], str) and error["message"], error
    assert isinstance(error["type"], str) and error["type"], error
    if param is not None:
        assert error["param"] == param or param in (error["param"] or "") or param in error["message"], error
    return error
