"""Anthropic Messages responses: the message object, stop reasons, usage, errors.

Outputs are the tokenizer manager's dicts (`text`, `meta_info`). A finished output's stop
reason is `tool_use` when the chat path parsed tool calls out of it, `max_tokens` when it hit
the limit, `stop_sequence` (with the sequence) when one of the request's `stop_sequences` ended
it, else `end_turn` (the model's end-of-turn token).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from sglang.runtime.server.openai.responses import finish_reason, matched_stop

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
}
"""HTTP status -> Anthropic's error type; any other status is an `api_error`."""


def anthropic_error_body(status: int, message: str, param: str | None = None) -> dict[str, Any]:
    """Anthropic's error shape; it has no field for the parameter, so the message names it."""
    return {"type": "error", "error": {"type": ERROR_TYPES.get(status, "api_error"), "message": message}}


THINKING_SIGNATURE = ""
"""Anthropic signs thinking so it can verify it when it is sent back; this server never checks
returned thinking (it drops it), so its blocks carry an empty signature."""


def message_id() -> str:
    return f"msg_{uuid.uuid4().hex}"


def usage(meta: dict[str, Any]) -> dict[str, Any]:
    return {
        "input_tokens": meta["prompt_tokens"],
        "output_tokens": meta["completion_tokens"],
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": meta.get("cached_tokens", 0),
    }


def stop_reason(meta: dict[str, Any], stop_sequences: list[str], tool_use: bool) -> tuple[str, str | None]:
    """(stop_reason, stop_sequence) of a finished output; raises ApiError for an aborted one."""
    reason = finish_reason(meta)
    if tool_use:
        return "tool_use", None
    if reason == "length":
        return "max_tokens", None
    matched = matched_stop(meta)
    if isinstance(matched, str) and matched in stop_sequences:
        return "stop_sequence", matched
    return "end_turn", None


def tool_use_block(call: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI tool call (as `parse_tool_calls` makes them) as a `tool_use` block."""
    function = call["function"]
    return {
        "type": "tool_use",
        "id": "toolu_" + call["id"].removeprefix("call_"),
        "name": function["name"],
        "input": json.loads(function["arguments"]),
    }


def message(
    model: str, content: list[dict[str, Any]], reason: tuple[str | None, str | None], usage: dict[str, Any]
) -> dict[str, Any]:
    return {
        "id": message_id(),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": reason[0],
        "stop_sequence": reason[1],
        "usage": usage,
    }
