"""An output as Anthropic content blocks: whole (`content_blocks`) or as stream events
(`EventStream`).

Blocks come in the order thinking, text, tool_use, as Anthropic sends them. Thinking is there
only when the server has a `--reasoning-parser` (the chat plan's `ReasoningSplit`); tool calls
only when the request has tools in play, read by the chat plan's `--tool-call-parser` format
(`sglang.runtime.parsers`).

Streamed, a response is `message_start`, `ping`, then per block `content_block_start`, its
deltas (`thinking_delta` then `signature_delta`, `text_delta`, `input_json_delta`) and
`content_block_stop`, then `message_delta` (stop reason, output tokens) and `message_stop`.
Text that may still turn out to be a tool call is held back (`output_split.py`), so text sent is
never contradicted by the parse at the end; tool_use blocks go out whole when the output ends
(only the calls valid in the whole output: a call cut short is dropped, not half-sent).
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from sglang.runtime.server.anthropic.responses import (
    THINKING_SIGNATURE,
    message,
    stop_reason,
    tool_use_block,
    usage,
)
from sglang.runtime.server.openai.chat import ReasoningSplit, ToolParsing
from sglang.runtime.server.openai.responses import finish_reason
from sglang.runtime.server.output_split import StreamSplitter, split_output


def content_blocks(
    text: str, tools: ToolParsing | None, reasoning: ReasoningSplit | None
) -> tuple[list[dict[str, Any]], bool]:
    """(the blocks of a whole output, whether it called a tool)."""
    split = split_output(text, tools, reasoning)
    blocks: list[dict[str, Any]] = []
    if split.reasoning:
        blocks.append({"type": "thinking", "thinking": split.reasoning, "signature": THINKING_SIGNATURE})
    if split.text or not split.calls:
        blocks.append({"type": "text", "text": split.text})
    blocks.extend(tool_use_block(call) for call in split.calls)
    return blocks, bool(split.calls)


def sse_event(payload: dict[str, Any]) -> bytes:
    """One server-sent event, named by its payload's type, as Anthropic sends them."""
    return b"event: " + payload["type"].encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


class EventStream:
    """The events of one streamed output, fed its cumulative outputs in order."""

    def __init__(
        self, model: str, tools: ToolParsing | None, stop_sequences: list[str], reasoning: ReasoningSplit | None
    ) -> None:
        self.model, self.stop_sequences = model, stop_sequences
        self.splitter = StreamSplitter(tools, reasoning)
        self.started = False
        self.seen = 0
        self.index = -1
        self.open: str | None = None
        """The type of the block being streamed, if one is open."""

    def update(self, output: dict[str, Any]) -> list[dict[str, Any]]:
        """The events the newest cumulative `output` adds: the first ones open the message, the
        last ones close it when the output is final. Raises ApiError for an aborted output."""
        meta, full = output["meta_info"], output["text"]
        events: list[dict[str, Any]] = []
        if not self.started:
            self.started = True
            opening = message(self.model, [], (None, None), {**usage(meta), "output_tokens": 0})
            events += [{"type": "message_start", "message": opening}, {"type": "ping"}]
        piece, self.seen = full[self.seen :], max(self.seen, len(full))
        done = finish_reason(meta) is not None
        split = self.splitter.feed(piece, done)
        if split.reasoning:
            events += self._delta("thinking", split.reasoning)
        if split.text:
            events += self._delta("text", split.text)
        if done:
            events += self._finish(meta, split.calls)
        return events

    def _open(self, kind: str) -> list[dict[str, Any]]:
        """Closes the open block, if any, and opens a `kind` block after it."""
        events = self._close()
        self.index += 1
        self.open = kind
        block = {"type": kind, kind: "", **({"signature": ""} if kind == "thinking" else {})}
        return [*events, {"type": "content_block_start", "index": self.index, "content_block": block}]

    def _delta(self, kind: str, piece: str) -> list[dict[str, Any]]:
        events = self._open(kind) if self.open != kind else []
        events.append(
            {"type": "content_block_delta", "index": self.index, "delta": {"type": f"{kind}_delta", kind: piece}}
        )
        return events

    def _close(self) -> list[dict[str, Any]]:
        if self.open is None:
            return []
        events = []
        if self.open == "thinking":
            signature = {"type": "signature_delta", "signature": THINKING_SIGNATURE}
            events.append({"type": "content_block_delta", "index": self.index, "delta": signature})
        self.open = None
        return [*events, {"type": "content_block_stop", "index": self.index}]

    def _finish(self, meta: dict[str, Any], calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
        # A message always holds a block, as in `content_blocks`: an empty text one at least.
        events = self._open("text") if self.index < 0 and not calls else []
        events += self._close()
        for call in calls:
            block = tool_use_block(call)
            self.index += 1
            start = {**block, "input": {}}
            arguments = {"type": "input_json_delta", "partial_json": json.dumps(block["input"], ensure_ascii=False)}
            events += [
                {"type": "content_block_start", "index": self.index, "content_block": start},
                {"type": "content_block_delta", "index": self.index, "delta": arguments},
                {"type": "content_block_stop", "index": self.index},
            ]
        reason, sequence = stop_reason(meta, self.stop_sequences, bool(calls))
        delta = {"stop_reason": reason, "stop_sequence": sequence}
        return [
            *events,
            {"type": "message_delta", "delta": delta, "usage": {"output_tokens": meta["completion_tokens"]}},
            {"type": "message_stop"},
        ]
