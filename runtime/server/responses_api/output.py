"""A finished output as a Responses API response object, and the pieces the stream sends.

An output is split by its chat plan (`output_split.py`): the thinking, when the server has a
`--reasoning-parser`; the answer; the tool calls, when the request has tools in play. Its items
come in that order: a `reasoning` item, a `message` item with one `output_text`
part (present unless the output is only calls), one `function_call` item per call. A response is
`completed`, or `incomplete` (`incomplete_details.reason`: "max_output_tokens") when the output
hit the token limit; an aborted output raises ApiError (`openai.responses.finish_reason`).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from sglang.runtime.server.openai.responses import finish_reason
from sglang.runtime.server.output_split import SplitOutput
from sglang.runtime.server.responses_api.protocol import ResponsesRequest, TextFormat


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def assistant_message(split: SplitOutput) -> dict[str, Any]:
    """The assistant turn as a chat message, for the next turn's history (its reasoning dropped,
    as chat templates drop earlier thoughts)."""
    message: dict[str, Any] = {"role": "assistant", "content": split.text}
    if split.calls:
        message.update(content=split.text or None, tool_calls=split.calls)
    return message


def reasoning_item(item_id: str, text: str, status: str) -> dict[str, Any]:
    content = [{"type": "reasoning_text", "text": text}] if text else []
    return {"type": "reasoning", "id": item_id, "summary": [], "content": content, "status": status}


def message_item(item_id: str, text: str | None, status: str, logprobs: list[Any] | None) -> dict[str, Any]:
    """A message item; `text` None: its part is not open yet (a stream's first sight of it)."""
    content = [] if text is None else [text_part(text, logprobs)]
    return {"type": "message", "id": item_id, "status": status, "role": "assistant", "content": content}


def text_part(text: str, logprobs: list[Any] | None) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs or []}


def call_item(call: dict[str, Any], status: str, arguments: str | None = None) -> dict[str, Any]:
    function = call["function"]
    return {
        "type": "function_call",
        "id": "fc_" + call["id"].removeprefix("call_"),
        "call_id": call["id"],
        "name": function["name"],
        "arguments": function["arguments"] if arguments is None else arguments,
        "status": status,
    }


def output_items(split: SplitOutput, status: str, logprobs: list[Any] | None) -> list[dict[str, Any]]:
    items = [reasoning_item(new_id("rs"), split.reasoning, "completed")] if split.reasoning else []
    if split.text or not split.calls:
        items.append(message_item(new_id("msg"), split.text, status, logprobs))
    items.extend(call_item(call, "completed") for call in split.calls)
    return items


def status_of(meta: dict[str, Any]) -> str:
    """`completed` or `incomplete` for a finished output; raises ApiError for an aborted one."""
    return "incomplete" if finish_reason(meta) == "length" else "completed"


def usage(meta: dict[str, Any], reasoning_tokens: int) -> dict[str, Any]:
    prompt, completion = meta["prompt_tokens"], meta["completion_tokens"]
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": meta.get("cached_tokens", 0)},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
        "total_tokens": prompt + completion,
    }


def _text_config(fmt: TextFormat | None) -> dict[str, Any]:
    if fmt is None:
        return {"format": {"type": "text"}}
    return {"format": fmt.model_dump(by_alias=True, exclude_none=True)}


@dataclass(frozen=True)
class ResponseShell:
    """What a response object echoes of its request, fixed when the request arrives."""

    id: str
    model: str
    request: ResponsesRequest
    created_at: int = field(default_factory=lambda: int(time.time()))

    def object(
        self,
        status: str,
        output: list[dict[str, Any]],
        usage: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        request = self.request
        incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
        reasoning = request.reasoning.model_dump() if request.reasoning else {"effort": None, "summary": None}
        tool_choice = request.tool_choice if isinstance(request.tool_choice, str) else request.tool_choice.model_dump()
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "background": request.background,
            "error": error,
            "incomplete_details": incomplete,
            "instructions": request.instructions,
            "max_output_tokens": request.max_output_tokens,
            "max_tool_calls": request.max_tool_calls,
            "metadata": request.metadata or {},
            "model": self.model,
            "output": output,
            "parallel_tool_calls": request.parallel_tool_calls,
            "previous_response_id": request.previous_response_id,
            "reasoning": {k: reasoning.get(k) for k in ("effort", "summary")},
            "service_tier": request.service_tier or "default",
            "store": request.store,
            "temperature": request.temperature,
            "text": _text_config(request.text.format if request.text else None),
            "tool_choice": tool_choice,
            "tools": [tool.model_dump(exclude_none=True) for tool in request.tools],
            "top_logprobs": request.top_logprobs or 0,
            "top_p": request.top_p,
            "truncation": request.truncation,
            "usage": usage,
            "user": request.user,
        }
