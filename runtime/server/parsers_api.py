"""Upstream SGLang's native parsing routes: the parsers run on text the client sends, no model.

- `POST /separate_reasoning` {text, reasoning_parser, return_blocks} -> {reasoning_text, text}
  (with `return_blocks`, also `reasoning_blocks`, `text_blocks` and the ordered `blocks`);
- `POST /parse_function_call` {text, tools, tool_call_parser} -> {normal_text, calls}, each call
  {tool_index, name, parameters} as upstream's `ToolCallItem` (`parameters` a JSON string).
An unknown parser name is a 400.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr

from sglang.runtime.parsers import parse_tool_calls, separate_reasoning, tool_format
from sglang.runtime.server.errors import ApiError, json_response
from sglang.runtime.server.openai.protocol import Tool

router = APIRouter()


class SeparateReasoningRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: StrictStr
    reasoning_parser: StrictStr
    return_blocks: StrictBool = False


class ParseFunctionCallRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: StrictStr
    tools: list[Tool] = Field(default_factory=list)
    tool_call_parser: StrictStr | None = None


@router.post("/separate_reasoning")
async def separate_reasoning_route(body: SeparateReasoningRequest) -> Response:
    try:
        split = separate_reasoning(body.text, body.reasoning_parser)
    except ValueError as e:
        raise ApiError(400, str(e), "reasoning_parser") from None
    out: dict[str, Any] = {"reasoning_text": split.reasoning, "text": split.content}
    if body.return_blocks:
        blocks = [{"type": "reasoning", "text": split.reasoning}] if split.reasoning else []
        blocks.append({"type": "text", "text": split.content})
        out |= {"reasoning_blocks": [split.reasoning] if split.reasoning else [], "text_blocks": [split.content]}
        out["blocks"] = blocks
    return json_response(out)


@router.post("/parse_function_call")
async def parse_function_call_route(body: ParseFunctionCallRequest) -> Response:
    try:
        fmt = tool_format(body.tool_call_parser)
    except ValueError as e:
        raise ApiError(400, str(e), "tool_call_parser") from None
    names = [tool.function.name for tool in body.tools]
    parsed = parse_tool_calls(body.text, frozenset(names), fmt)
    calls = [
        {
            "tool_index": names.index(call["function"]["name"]),
            "name": call["function"]["name"],
            "parameters": call["function"]["arguments"],
        }
        for call in parsed.calls
    ]
    return json_response({"normal_text": parsed.content, "calls": calls})
