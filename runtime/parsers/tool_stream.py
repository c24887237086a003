"""Tool calls out of a streaming output, as OpenAI deltas, and out of a finished one.

`ToolCallStream.feed(piece)` takes the next piece of the answer text and returns a `ToolDelta`:
content that can go out now and tool-call deltas in OpenAI's streaming shape (a call's first
delta carries `index`, `id`, `type` and the function's `name` with empty `arguments`; later
ones carry `index` and more `arguments` text). `finish()` settles the rest against the parse
of the whole text. `parse_tool_calls` is that same settlement of the whole text, so a streamed
and a whole response agree (but for a call cut short, below).

Validity: a call counts when it names one of the request's tools and its arguments are a
complete JSON object (written as an object, or as a JSON string holding one); other calls are
dropped. When no call counts, the whole text is content. Otherwise the content is the text
before the calls section; text after the last call is dropped (a model that calls ends there).

Invariants while streaming: the content sent is a prefix of the final content (text that may
still turn into a call is held back); a call is announced only once its name is complete and
one of the tools; the arguments sent are a prefix of its final arguments. A call cut short by
the end of the output, once announced, cannot be taken back: its deltas stay as sent.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from sglang.runtime.parsers.json_scan import CallScan, arguments_object
from sglang.runtime.parsers.reasoning import held_suffix
from sglang.runtime.parsers.tool_formats import DEFAULT_FORMAT, ToolFormat


@dataclass
class ToolDelta:
    content: str = ""
    calls: list[dict[str, Any]] = field(default_factory=list)
    """OpenAI `delta.tool_calls` items."""


@dataclass(frozen=True)
class ParsedOutput:
    content: str
    """Text before the first call (all of the text when there is none); unstripped."""
    calls: list[dict[str, Any]]
    """OpenAI tool calls: {"id", "type": "function", "function": {"name", "arguments" (JSON)}}."""


@dataclass
class _Announced:
    index: int
    arguments_sent: int = 0


def _valid(call: CallScan, names: frozenset[str]) -> bool:
    return call.name in names and call.args_done and arguments_object(call.arguments)


class ToolCallStream:
    def __init__(self, fmt: ToolFormat, names: frozenset[str]) -> None:
        self.fmt, self.names = fmt, names
        self.text = ""
        self.content_sent = 0
        self.announced: dict[int, _Announced] = {}
        """Scan position of a call -> what was sent of it."""

    @property
    def called(self) -> bool:
        return bool(self.announced)

    def feed(self, piece: str) -> ToolDelta:
        self.text += piece
        scan = self.fmt.scan(self.text)
        safe = min(scan.content_end, len(self.text) - held_suffix(self.text, self.fmt.markers))
        delta = ToolDelta(self._content(self.text, safe))
        for position, call in enumerate(scan.calls):
            if call.name in self.names and (call.args_done or call.arguments.startswith("{")):
                delta.calls += self._call_delta(position, call)
        return delta

    def finish(self) -> ToolDelta:
        scan = self.fmt.scan(self.text)
        valid = [(p, c) for p, c in enumerate(scan.calls) if _valid(c, self.names)]
        content = self.text[: scan.content_end] if valid else self.text
        delta = ToolDelta(self._content(content, len(content)))
        for position, call in valid:
            delta.calls += self._call_delta(position, call)
        return delta

    def _content(self, text: str, end: int) -> str:
        piece = text[self.content_sent : end]
        self.content_sent = max(self.content_sent, end)
        return piece

    def _call_delta(self, position: int, call: CallScan) -> list[dict[str, Any]]:
        assert call.name is not None
        out = []
        sent = self.announced.get(position)
        if sent is None:
            sent = self.announced[position] = _Announced(len(self.announced))
            header = {"index": sent.index, "id": f"call_{uuid.uuid4().hex[:24]}", "type": "function"}
            out.append({**header, "function": {"name": call.name, "arguments": ""}})
        more = call.arguments[sent.arguments_sent :]
        if more:
            sent.arguments_sent = len(call.arguments)
            out.append({"index": sent.index, "function": {"arguments": more}})
        return out


def merge_calls(deltas: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Whole OpenAI tool calls from their streaming deltas."""
    calls: dict[int, dict[str, Any]] = {}
    for item in deltas:
        call = calls.setdefault(item["index"], {"function": {"name": "", "arguments": ""}})
        for key in ("id", "type"):
            if key in item:
                call[key] = item[key]
        function = item.get("function", {})
        if "name" in function:
            call["function"]["name"] = function["name"]
        call["function"]["arguments"] += function.get("arguments", "")
    return [{"id": c["id"], "type": c["type"], "function": c["function"]} for _, c in sorted(calls.items())]


def parse_tool_calls(text: str, names: frozenset[str], fmt: ToolFormat = DEFAULT_FORMAT) -> ParsedOutput:
    """The calls to functions in `names` that `fmt` finds in the whole of `text`, and the content."""
    stream = ToolCallStream(fmt, names)
    stream.text = text  # no feed: nothing is announced before the whole is known
    whole = stream.finish()
    return ParsedOutput(whole.content, merge_calls(whole.calls))
