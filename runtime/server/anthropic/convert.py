"""An Anthropic Messages request as the OpenAI chat request the server already runs.

The chat path then renders the template, describes the tools, forces a call where asked and
parses calls out of the output (`openai.chat.chat_plan`), so both APIs behave alike. Mapping:
- `system` (a string or text blocks) is the first, system message;
- a user turn's `tool_result` blocks become `tool` messages (before the turn's own text, which
  is the user's reply to them); an assistant turn's `tool_use` blocks become its `tool_calls`
  (arguments as JSON); earlier thinking blocks are dropped, as Anthropic drops them;
- `tool_choice` auto / any / tool / none -> auto / required / the named function / none, and
  `disable_parallel_tool_use` -> `parallel_tool_calls: false`;
- `stop_sequences` -> `stop`, `max_tokens`, `temperature`, `top_p`, `top_k` as they are;
- `output_config.format` (a JSON schema) -> `response_format` json_schema.
Image and document blocks are refused with a 400 that says why.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from sglang.runtime.server.anthropic.protocol import (
    Conversation,
    ImageBlock,
    Message,
    MessagesRequest,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from sglang.runtime.server.errors import ApiError
from sglang.runtime.server.openai.protocol import ChatCompletionRequest

TEXT_ONLY = "this server serves a text-only model; image and document blocks are not supported"


def _refuse_media(block: Any, where: str) -> None:
    if isinstance(block, ImageBlock):
        raise ApiError(400, f"{where}: {block.type} block refused: {TEXT_ONLY}", where)


def _text(content: str | list[Any] | None, where: str) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    for block in content:
        _refuse_media(block, where)
    return "\n".join(block.text for block in content if isinstance(block, TextBlock))


def _tool_result(block: ToolResultBlock, where: str) -> dict[str, Any]:
    text = _text(block.content, where)
    return {"role": "tool", "tool_call_id": block.tool_use_id, "content": f"Error: {text}" if block.is_error else text}


def _turn(message: Message, index: int) -> list[dict[str, Any]]:
    """The OpenAI messages of one Anthropic turn."""
    where = f"messages.{index}.content"
    if isinstance(message.content, str):
        return [{"role": message.role, "content": message.content}]
    results: list[dict[str, Any]] = []
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in message.content:
        _refuse_media(block, where)
        if isinstance(block, TextBlock):
            texts.append(block.text)
        elif isinstance(block, ToolResultBlock):
            if message.role != "user":
                raise ApiError(400, "tool_result blocks belong in user turns", where)
            results.append(_tool_result(block, where))
        elif isinstance(block, ToolUseBlock):
            if message.role != "assistant":
                raise ApiError(400, "tool_use blocks belong in assistant turns", where)
            arguments = json.dumps(block.input, ensure_ascii=False)
            calls.append({"id": block.id, "type": "function", "function": {"name": block.name, "arguments": arguments}})
    out = results
    if texts or calls or not results:
        turn: dict[str, Any] = {"role": message.role, "content": "\n".join(texts) if texts or not calls else None}
        if calls:
            turn["tool_calls"] = calls
        out.append(turn)
    return out


def _tool_fields(request: Conversation) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    if request.tools:
        fields["tools"] = [
            {
                "type": "function",
                "function": {"name": t.name, "description": t.description, "parameters": t.input_schema},
            }
            for t in request.tools
        ]
    choice = request.tool_choice
    if choice is None:
        return fields
    if choice.type == "tool":
        if not choice.name:
            raise ApiError(400, "tool_choice of type tool needs a name", "tool_choice.name")
        fields["tool_choice"] = {"type": "function", "function": {"name": choice.name}}
    else:
        fields["tool_choice"] = {"auto": "auto", "any": "required", "none": "none"}[choice.type]
    if choice.disable_parallel_tool_use:
        fields["parallel_tool_calls"] = False
    return fields


def chat_request(request: Conversation) -> ChatCompletionRequest:
    """The OpenAI chat request that runs `request` (a `CountTokensRequest` gets a request with
    no token limit: only its prompt is used). Raises ApiError (400) for what cannot be served."""
    messages: list[dict[str, Any]] = []
    if request.system:
        messages.append({"role": "system", "content": _text(request.system, "system")})
    for index, message in enumerate(request.messages):
        messages.extend(_turn(message, index))
    fields: dict[str, Any] = {"model": request.model, "messages": messages, **_tool_fields(request)}
    if isinstance(request, MessagesRequest):
        sampling = {
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
            "top_p": request.top_p,
            "top_k": request.top_k,
            "stop": request.stop_sequences or None,
        }
        fields.update({k: v for k, v in sampling.items() if v is not None})
        output = request.output_config
        if output is not None and output.format is not None:
            schema = {"name": "output", "schema": output.format.schema_}
            fields["response_format"] = {"type": "json_schema", "json_schema": schema}
    try:
        return ChatCompletionRequest.model_validate(fields)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ApiError(400, f"{first['msg']} ({where})", where) from None
