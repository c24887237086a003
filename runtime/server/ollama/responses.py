"""Ollama responses: chat and generate objects, whole or as newline-delimited JSON chunks.

A stream is one JSON object per line: each carries its new text (`message.content` for chat,
`response` for generate) and `done: false`; the last one has `done: true`, the done reason
(`stop` or `length`), the token counts and durations (nanoseconds), and for chat any tool
calls. Text that may still become a tool call is held back (`ToolCallStream`), so streamed
content is never contradicted by the calls parsed at the end. With `think` and a server
`--reasoning-parser`, the model's thinking goes to `thinking` (chat: `message.thinking`).
Errors are `{"error": message}`, Ollama's shape, as a body or, once a stream began, as its
last line.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from sglang.runtime.parsers import ReasoningDelta, ReasoningParser, ToolCallStream, parse_tool_calls
from sglang.runtime.server.openai.chat import ReasoningSplit, ToolParsing
from sglang.runtime.server.openai.responses import finish_reason


def ollama_error_body(status: int, message: str, param: str | None = None) -> dict[str, Any]:
    return {"error": message}


def timestamp(after: timedelta = timedelta()) -> str:
    """Now (or `after` from now), as Ollama writes `created_at` (RFC 3339, UTC)."""
    return (datetime.now(UTC) + after).isoformat(timespec="microseconds").replace("+00:00", "Z")


def done_fields(meta: dict[str, Any]) -> dict[str, Any]:
    """The fields of a final object; raises ApiError for an aborted output."""
    reason = finish_reason(meta)
    total = meta.get("e2e_latency") or 0.0
    first = min(meta.get("ttft") or 0.0, total)
    return {
        "done": True,
        "done_reason": "length" if reason == "length" else "stop",
        "total_duration": int(total * 1e9),
        "load_duration": 0,
        "prompt_eval_count": meta["prompt_tokens"],
        "prompt_eval_duration": int(first * 1e9),
        "eval_count": meta["completion_tokens"],
        "eval_duration": int((total - first) * 1e9),
    }


def ollama_tool_calls(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI tool calls (arguments as JSON text) as Ollama's (arguments as an object)."""
    return [
        {"function": {"name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"])}}
        for c in calls
    ]


def split_thinking(text: str, reasoning: ReasoningSplit | None) -> ReasoningDelta:
    """A whole output's thinking and answer (all answer without a reasoning split)."""
    if reasoning is None:
        return ReasoningDelta(content=text)
    parser = reasoning.parser(streaming=False)
    return parser.feed(text) + parser.finish()


def assistant_message(text: str, tools: ToolParsing | None, thinking: str = "") -> dict[str, Any]:
    """The whole answer as a chat message, its tool calls parsed out, with the thinking if any."""
    if thinking:
        return {**assistant_message(text, tools), "thinking": thinking}
    if tools is not None:
        parsed = parse_tool_calls(text, tools.names, tools.fmt)
        if parsed.calls:
            return {
                "role": "assistant",
                "content": parsed.content.strip(),
                "tool_calls": ollama_tool_calls(parsed.calls),
            }
    return {"role": "assistant", "content": text}


class ChunkStream:
    """The chunks of one streamed output (`chat`: messages; otherwise generate's `response`),
    fed its cumulative outputs in order."""

    def __init__(
        self, model: str, chat: bool, tools: ToolParsing | None, reasoning: ReasoningSplit | None = None
    ) -> None:
        self.model, self.chat = model, chat
        self.reasoning: ReasoningParser | None = None if reasoning is None else reasoning.parser(streaming=True)
        self.tools: ToolCallStream | None = None if tools is None else tools.stream()
        self.tool_names = frozenset() if tools is None else tools.names
        self.sent = 0

    def update(self, output: dict[str, Any]) -> list[dict[str, Any]]:
        meta, full = output["meta_info"], output["text"]
        done = finish_reason(meta) is not None
        calls: list[dict[str, Any]] = []
        piece, self.sent = full[self.sent :], max(self.sent, len(full))
        thinking = ""
        if self.reasoning is not None:
            split = self.reasoning.feed(piece) + (self.reasoning.finish() if done else ReasoningDelta())
            thinking, piece = split.reasoning, split.content
        if self.tools is not None:
            piece = self.tools.feed(piece).content
            if done:
                piece += self.tools.finish().content
                calls = parse_tool_calls(self.tools.text, self.tool_names, self.tools.fmt).calls
        if not piece and not thinking and not done:
            return []
        chunk: dict[str, Any] = {"model": self.model, "created_at": timestamp()}
        if self.chat:
            chunk["message"] = {"role": "assistant", "content": piece}
            if thinking:
                chunk["message"]["thinking"] = thinking
            if calls:
                chunk["message"]["tool_calls"] = ollama_tool_calls(calls)
        else:
            chunk["response"] = piece
            if thinking:
                chunk["thinking"] = thinking
        chunk.update(done_fields(meta) if done else {"done": False})
        return [chunk]
