"""A Responses request as the OpenAI chat request the server already runs.

The chat path then renders the template, describes the tools, forces a call where asked and
parses calls and reasoning out of the output (`openai.chat.chat_plan`), so the Responses API
behaves as the chat API does on the same conversation. Mapping:
- `instructions` is the first, system message; it is not carried into the next turn (as OpenAI:
  a `previous_response_id` brings the earlier turns, not their instructions);
- `input` (a string: one user turn) as messages: message items as they are (`developer` as a
  system turn when the template has no developer role is the template's business), consecutive
  `function_call` items as one assistant turn's `tool_calls`, `function_call_output` items as
  `tool` messages; reasoning items are dropped;
- `max_output_tokens` -> `max_completion_tokens`; `temperature`, `top_p`, `stop`, `seed`, the
  penalties and SGLang's sampling extras as they are;
- function tools -> chat tools; `tool_choice` as on the chat route (`{"type": "function",
  "name"}` -> the named function);
- `text.format` -> `response_format`; `reasoning.effort` -> `reasoning_effort`.
Media parts, hosted tools and other item types are refused with a 400 that says why.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from sglang.runtime.requests import upstream_fields
from sglang.runtime.server.errors import ApiError
from sglang.runtime.server.openai.protocol import SAMPLING_EXTRAS, ChatCompletionRequest
from sglang.runtime.server.responses_api.protocol import (
    FunctionCallItem,
    FunctionCallOutputItem,
    HostedTool,
    InputText,
    MediaPart,
    MessageItem,
    OtherItem,
    OutputText,
    ReasoningItem,
    Refusal,
    ResponsesRequest,
    TextFormat,
)

LOGPROBS = "message.output_text.logprobs"
"""The `include` entry that asks for the answer's token logprobs (`top_logprobs` alternatives each)."""

TEXT_ONLY = "this server serves a text-only model; image, file and audio parts are not supported"

Message = dict[str, Any]


def _text(content: str | list[Any], where: str) -> str:
    if isinstance(content, str):
        return content
    texts = []
    for index, part in enumerate(content):
        if isinstance(part, MediaPart):
            raise ApiError(400, f"{part.type} part refused: {TEXT_ONLY}", f"{where}.{index}")
        if isinstance(part, InputText | OutputText):
            texts.append(part.text)
        elif isinstance(part, Refusal):
            texts.append(part.refusal)
    return "".join(texts)


def input_messages(items: str | list[Any]) -> list[Message]:
    """The chat messages of a request's `input`."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    messages: list[Message] = []
    for index, item in enumerate(items):
        where = f"input.{index}"
        if isinstance(item, MessageItem):
            messages.append({"role": item.role, "content": _text(item.content, f"{where}.content")})
        elif isinstance(item, FunctionCallItem):
            call = {
                "id": item.call_id,
                "type": "function",
                "function": {"name": item.name, "arguments": item.arguments},
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and "tool_calls" in last:
                last["tool_calls"].append(call)  # parallel calls of one turn
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif isinstance(item, FunctionCallOutputItem):
            output = _text(item.output, f"{where}.output")
            messages.append({"role": "tool", "tool_call_id": item.call_id, "content": output})
        elif isinstance(item, OtherItem):
            raise ApiError(400, f"input items of type {item.type!r} are not supported by this server", where)
        else:
            assert isinstance(item, ReasoningItem)
    return messages


def _format(fmt: TextFormat | None) -> dict[str, Any] | None:
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return {"type": "json_object"}
    if fmt.schema_ is None:
        raise ApiError(400, "text.format of type json_schema needs a schema", "text.format.schema")
    schema = {"name": fmt.name or "output", "schema": fmt.schema_, "strict": fmt.strict}
    return {"type": "json_schema", "json_schema": schema}


def _tool_fields(request: ResponsesRequest) -> dict[str, Any]:
    fields: dict[str, Any] = {"parallel_tool_calls": request.parallel_tool_calls}
    tools = []
    for index, tool in enumerate(request.tools):
        if isinstance(tool, HostedTool):
            message = f"tools of type {tool.type!r} are not supported by this server: only function tools"
            raise ApiError(400, message, f"tools.{index}.type")
        function = {"name": tool.name, "description": tool.description, "parameters": tool.parameters}
        tools.append({"type": "function", "function": {k: v for k, v in function.items() if v is not None}})
    if tools:
        fields["tools"] = tools
    choice = request.tool_choice
    if not isinstance(choice, str):
        fields["tool_choice"] = {"type": "function", "function": {"name": choice.name}}
    elif tools or choice != "auto":
        fields["tool_choice"] = choice
    return fields


def _extras(request: ResponsesRequest) -> dict[str, Any]:
    """The sampling fields and SGLang extras the client set, under the chat route's names."""
    names = (
        *SAMPLING_EXTRAS,
        *upstream_fields.OPENAI,
        "temperature",
        "top_p",
        "stop",
        "seed",
        "priority",
        "regex",
        "ebnf",
        "frequency_penalty",
        "presence_penalty",
        "user",
        "chat_template_kwargs",
    )
    fields = {name: value for name in names if (value := getattr(request, name)) is not None}
    if request.max_output_tokens is not None:
        fields["max_completion_tokens"] = request.max_output_tokens
    if LOGPROBS in (request.include or []):
        fields.update(logprobs=True, top_logprobs=request.top_logprobs or 0)
    if request.reasoning is not None and request.reasoning.effort is not None:
        fields["reasoning_effort"] = request.reasoning.effort
    return fields


def chat_request(request: ResponsesRequest, history: list[Message]) -> tuple[ChatCompletionRequest, list[Message]]:
    """(the chat request that runs `request` after the conversation `history`, the messages this
    turn adds to it). Raises ApiError (400) for what cannot be served."""
    turn = input_messages(request.input)
    system = [{"role": "system", "content": request.instructions}] if request.instructions else []
    messages = [*system, *history, *turn]
    if not messages:
        raise ApiError(400, "input holds no message", "input")
    fields: dict[str, Any] = {"model": request.model, "messages": messages, **_tool_fields(request)}
    response_format = _format(request.text.format if request.text else None)
    if response_format is not None:
        fields["response_format"] = response_format
    fields |= _extras(request)
    try:
        return ChatCompletionRequest.model_validate(fields), turn
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ApiError(400, f"{first['msg']} ({where})", where) from None
