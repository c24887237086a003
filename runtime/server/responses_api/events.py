"""A streamed response's server-sent events, fed the generation's cumulative outputs in order.

The sequence, as OpenAI sends it (every event numbered by `sequence_number` from 0):
`response.created`, `response.in_progress`; per output item `response.output_item.added`, its
deltas and `response.output_item.done` (a reasoning item: `response.reasoning_text.delta` /
`.done`; the message: `response.content_part.added`, `response.output_text.delta` / `.done`,
`response.content_part.done`; a function call: `response.function_call_arguments.delta` /
`.done`); then `response.completed` or `response.incomplete` with the whole response. Text
that may still turn out to be a tool call is held back, so text sent is never contradicted by
the parse at the end; calls go out whole when the output ends (only those valid in the whole
output: `output_split.py`). An error after the stream began is one `error` event, which ends
it. With `include: ["message.output_text.logprobs"]` each text delta carries the entries of the
tokens generated since the previous delta (thinking and held-back text included, as in a whole
response, whose answer carries every token's), and `.done` all of them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from sglang.runtime.server.openai.chat import ReasoningSplit, ToolParsing
from sglang.runtime.server.openai.responses import finish_reason
from sglang.runtime.server.output_split import SplitOutput, StreamSplitter
from sglang.runtime.server.responses_api.output import (
    ResponseShell,
    call_item,
    message_item,
    new_id,
    reasoning_item,
    status_of,
    text_part,
    usage,
)

Event = dict[str, Any]


def sse_event(payload: Event) -> bytes:
    return b"event: " + payload["type"].encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


class EventStream:
    """The events of one streamed response. `final` holds the whole response once sent, and
    `turn` the output's parts (as `output_split.split_output` of the whole text)."""

    def __init__(
        self,
        shell: ResponseShell,
        tools: ToolParsing | None,
        reasoning: ReasoningSplit | None,
        count_tokens: Callable[[str], int],
        new_logprobs: Callable[[dict[str, Any]], list[Any]] | None = None,
    ) -> None:
        """`new_logprobs(meta_info)`: the logprob entries of the tokens it adds, where the client
        asked for them (`include`); each text delta carries those that came since the last one."""
        self.shell, self.count_tokens, self.new_logprobs = shell, count_tokens, new_logprobs
        self.splitter = StreamSplitter(tools, reasoning)
        self.logprobs: list[Any] = []
        """The entries of every token so far; those past `logprobs_sent` are not sent yet."""
        self.logprobs_sent = 0
        self.sequence = 0
        self.started = False
        self.seen = 0
        self.items: list[dict[str, Any]] = []
        self.open: str | None = None
        """The kind of item being streamed ("reasoning" or "message"), if one is open."""
        self.open_id = ""
        self.open_text = ""
        self.turn = SplitOutput("", "")
        self.final: dict[str, Any] | None = None

    def event(self, kind: str, **fields: Any) -> Event:
        payload = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return payload

    def error(self, status: int, message: str, param: str | None) -> Event:
        return self.event("error", code=str(status), message=message, param=param)

    def update(self, output: dict[str, Any]) -> list[Event]:
        """The events the newest cumulative `output` adds. Raises ApiError for an aborted output."""
        meta, full = output["meta_info"], output["text"]
        events: list[Event] = []
        if self.new_logprobs is not None:
            self.logprobs += self.new_logprobs(meta)
        if not self.started:
            self.started = True
            opening = self.shell.object("in_progress", [])
            events += [
                self.event("response.created", response=opening),
                self.event("response.in_progress", response=opening),
            ]
        piece, self.seen = full[self.seen :], max(self.seen, len(full))
        done = finish_reason(meta) is not None
        split = self.splitter.feed(piece, done)
        if split.reasoning:
            events += self._delta("reasoning", split.reasoning)
        if split.text:
            events += self._delta("message", split.text)
        if done:
            events += self._finish(meta, split.calls)
        return events

    def _open(self, kind: str) -> list[Event]:
        events = self._close("completed")
        self.open, self.open_id, self.open_text = kind, new_id("rs" if kind == "reasoning" else "msg"), ""
        index = len(self.items)
        if kind == "reasoning":
            item = reasoning_item(self.open_id, "", "in_progress")
            return [*events, self.event("response.output_item.added", output_index=index, item=item)]
        item = message_item(self.open_id, None, "in_progress", None)
        part = text_part("", None)
        return [
            *events,
            self.event("response.output_item.added", output_index=index, item=item),
            self.event("response.content_part.added", **self._where(), part=part),
        ]

    def _where(self) -> dict[str, Any]:
        """Where the open item's text goes: its id, its index in the output, its one part."""
        return {"item_id": self.open_id, "output_index": len(self.items), "content_index": 0}

    def _delta(self, kind: str, piece: str) -> list[Event]:
        events = self._open(kind) if self.open != kind else []
        self.open_text += piece
        where = self._where()
        if kind == "reasoning":
            return [*events, self.event("response.reasoning_text.delta", **where, delta=piece)]
        logprobs, self.logprobs_sent = self.logprobs[self.logprobs_sent :], len(self.logprobs)
        return [*events, self.event("response.output_text.delta", **where, delta=piece, logprobs=logprobs)]

    def _close(self, status: str) -> list[Event]:
        if self.open is None:
            return []
        where = self._where()
        text = self.open_text
        if self.open == "reasoning":
            self.turn.reasoning = text
            item = reasoning_item(self.open_id, text, "completed")
            events = [self.event("response.reasoning_text.done", **where, text=text)]
        else:
            self.turn.text = text
            item = message_item(self.open_id, text, status, self.logprobs)
            part = text_part(text, self.logprobs)
            # Tokens that added no text (a special token) still send their entries, as the chat
            # route's chunks do: in a last, empty delta.
            events = self._delta("message", "") if self.logprobs_sent < len(self.logprobs) else []
            events += [
                self.event("response.output_text.done", **where, text=text, logprobs=self.logprobs),
                self.event("response.content_part.done", **where, part=part),
            ]
        events.append(self.event("response.output_item.done", output_index=len(self.items), item=item))
        self.items.append(item)
        self.open = None
        return events

    def _finish(self, meta: dict[str, Any], calls: list[dict[str, Any]]) -> list[Event]:
        status = status_of(meta)
        # A response without calls always holds a message, as in `output.output_items`.
        events = self._open("message") if self.open != "message" and not calls and not self.turn.text else []
        events += self._close(status)
        for call in calls:
            index = len(self.items)
            item = call_item(call, "completed")
            arguments = item["arguments"]
            events += [
                self.event("response.output_item.added", output_index=index, item=call_item(call, "in_progress", "")),
                self.event(
                    "response.function_call_arguments.delta", item_id=item["id"], output_index=index, delta=arguments
                ),
                self.event(
                    "response.function_call_arguments.done", item_id=item["id"], output_index=index, arguments=arguments
                ),
                self.event("response.output_item.done", output_index=index, item=item),
            ]
            self.items.append(item)
        self.turn.calls = calls
        reasoning_tokens = self.count_tokens(self.turn.reasoning) if self.turn.reasoning else 0
        self.final = self.shell.object(status, self.items, usage(meta, reasoning_tokens))
        return [*events, self.event(f"response.{status}", response=self.final)]
