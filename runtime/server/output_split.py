"""A generation's text split as its chat plan says: the thinking (with a `--reasoning-parser`),
the answer, and the tool calls (when the request has tools in play), whole (`split_output`) or as
the output streams (`StreamSplitter`).

For the APIs that put the parts in blocks or items of their own (Anthropic's Messages, OpenAI's
Responses); the chat route streams tool-call deltas instead (`openai.chat.ChatChunker`).
Invariant: the pieces a `StreamSplitter` returns add up to `split_output` of the whole text, and
text that may still turn out to be a tool call is held back until it is known not to be one, so
text sent is never contradicted by the parse at the end; calls come whole when the output ends
(only those valid in the whole output: a call cut short is dropped, not half-sent).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sglang.runtime.parsers import ReasoningDelta, ReasoningParser, ToolCallStream, parse_tool_calls
from sglang.runtime.server.openai.chat import ReasoningSplit, ToolParsing


@dataclass
class SplitOutput:
    """Parts of an output; `calls` are chat tool calls (`{"id", "type", "function": {"name",
    "arguments"}}`, as `parse_tool_calls` makes them)."""

    reasoning: str
    text: str
    calls: list[dict[str, Any]] = field(default_factory=list)


def split_output(text: str, tools: ToolParsing | None, reasoning: ReasoningSplit | None) -> SplitOutput:
    thought = ""
    if reasoning is not None:
        parser = reasoning.parser(streaming=False)
        split = parser.feed(text) + parser.finish()
        thought, text = split.reasoning, split.content
    if tools is not None:
        parsed = parse_tool_calls(text, tools.names, tools.fmt)
        if parsed.calls:
            return SplitOutput(thought, parsed.content.strip(), parsed.calls)
    return SplitOutput(thought, text)


class StreamSplitter:
    """Splits a streamed output piece by piece (`feed` each new piece of text in order)."""

    def __init__(self, tools: ToolParsing | None, reasoning: ReasoningSplit | None) -> None:
        self.reasoning: ReasoningParser | None = None if reasoning is None else reasoning.parser(streaming=True)
        self.tools: ToolCallStream | None = None if tools is None else tools.stream()
        self.tool_names = frozenset() if tools is None else tools.names

    def feed(self, piece: str, done: bool) -> SplitOutput:
        """The thinking and answer text `piece` adds; with `done` (the output's last piece), the
        rest of both and the calls of the whole output."""
        thought, answer = "", piece
        if self.reasoning is not None:
            split = self.reasoning.feed(piece) + (self.reasoning.finish() if done else ReasoningDelta())
            thought, answer = split.reasoning, split.content
        if self.tools is None:
            return SplitOutput(thought, answer)
        text = self.tools.feed(answer).content
        if not done:
            return SplitOutput(thought, text)
        text += self.tools.finish().content
        return SplitOutput(thought, text, parse_tool_calls(self.tools.text, self.tool_names, self.tools.fmt).calls)
