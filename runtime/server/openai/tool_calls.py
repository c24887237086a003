"""Tool calls in model output: the formats understood, the grammar that forces one, streaming.

Two formats are parsed:
- Hermes/Qwen: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, one block per call,
  possibly after some text (the message content); a block cut short by the end of the output
  still counts when its JSON is complete;
- plain JSON: the whole output is one call object or a list of them (Llama 3.1 style, and what
  `forced_call_schema` makes the model write). `parameters` is accepted for `arguments`.
A call must name one of the request's tools; anything else stays text. When calls are found,
the content is the text before the first one, and text after the last one is dropped (a model
that calls a tool ends its turn there).
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

CALL_START = "<tool_call>"
_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|\Z)", re.DOTALL)


@dataclass(frozen=True)
class ParsedOutput:
    content: str
    """Text before the first call (all of the text when there is none); unstripped."""
    calls: list[dict[str, Any]]
    """OpenAI tool calls: {"id", "type": "function", "function": {"name", "arguments" (JSON)}}."""


def _call(item: Any, names: frozenset[str]) -> dict[str, Any] | None:
    if not isinstance(item, dict) or item.get("name") not in names:
        return None
    arguments = item.get("arguments", item.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return None
    if not isinstance(arguments, dict):
        return None
    function = {"name": item["name"], "arguments": json.dumps(arguments, ensure_ascii=False)}
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function", "function": function}


def _calls_in(source: str, names: frozenset[str]) -> list[dict[str, Any]]:
    """The calls in a JSON object or list; none unless every item is a valid call."""
    try:
        value = json.loads(source)
    except json.JSONDecodeError:
        return []
    items = value if isinstance(value, list) else [value]
    calls = [_call(item, names) for item in items]
    return [c for c in calls if c is not None] if items and all(calls) else []


def parse_tool_calls(text: str, names: frozenset[str]) -> ParsedOutput:
    """The tool calls to functions in `names` found in `text`, and the content around them."""
    start = text.find(CALL_START)
    if start >= 0:
        calls = [call for block in _BLOCK.finditer(text, start) for call in _calls_in(block.group(1), names)]
        if calls:
            return ParsedOutput(text[:start], calls)
    elif text.lstrip().startswith(("{", "[")):
        calls = _calls_in(text.strip(), names)
        if calls:
            return ParsedOutput("", calls)
    return ParsedOutput(text, [])


def forced_call_schema(tools: list[dict[str, Any]], named: str | None, parallel: bool) -> str:
    """The JSON schema (for xgrammar) that makes the output a call in the plain format:
    one object calling `named`, or (tool_choice "required") a list of calls to any of `tools`,
    at least one, at most one unless `parallel`."""

    def call_schema(function: dict[str, Any]) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {
                "name": {"const": function["name"]},
                "arguments": function.get("parameters") or {"type": "object"},
            },
            "required": ["name", "arguments"],
        }

    functions = [tool["function"] for tool in tools]
    if named is not None:
        return json.dumps(call_schema(next(f for f in functions if f["name"] == named)))
    schema: dict[str, Any] = {"type": "array", "items": {"anyOf": [call_schema(f) for f in functions]}, "minItems": 1}
    if not parallel:
        schema["maxItems"] = 1
    return json.dumps(schema)


class ToolCallStream:
    """While a chat streams with tools, says how much of the text may go out as content now.

    Invariant: what has been sent (`sent` characters) is a prefix of `ParsedOutput.content` of
    the final text, so content streamed early is never contradicted by the parse at the end.
    Held back: everything once a call may have begun (`<tool_call>` seen, or output starting
    like JSON), and any ending that could grow into `<tool_call>`. With `forced`, all of it.
    """

    def __init__(self, names: frozenset[str], forced: bool) -> None:
        self.names = names
        self.holding = forced
        self.sent = 0

    def content_delta(self, text: str) -> str:
        """The content of `text` (the cumulative output) that can be sent now, not sent before."""
        if self.holding:
            return ""
        start = text.find(CALL_START)
        if start >= 0:
            self.holding = True
            return self._send(text, start)
        if self.sent == 0 and (not text.strip() or text.lstrip()[0] in "{["):
            return ""  # may still become a plain-JSON call
        end = len(text)
        for k in range(min(len(text), len(CALL_START) - 1), 0, -1):
            if CALL_START.startswith(text[-k:]):
                end -= k
                break
        return self._send(text, end)

    def finish(self, text: str) -> tuple[str, list[dict[str, Any]]]:
        """For the final text: the content not sent yet, and the tool calls."""
        parsed = parse_tool_calls(text, self.names)
        return self._send(parsed.content, len(parsed.content)), parsed.calls

    def _send(self, text: str, end: int) -> str:
        delta = text[self.sent : end]
        self.sent = max(self.sent, end)
        return delta
