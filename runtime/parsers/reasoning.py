"""Reasoning parsers: split a reasoning model's output into its thinking and its answer.

`--reasoning-parser NAME` picks a format by upstream SGLang's name (`REASONING_PARSERS`). Most
formats wrap the thinking in a pair of tags (`TagFormat`, parsed by `TagReasoningStream`);
gpt-oss writes Harmony channels (`harmony.HarmonyReasoningStream`). Every parser is a streaming
state machine with one interface, `ReasoningParser`: `feed(text)` takes the next piece of output
and returns what is now known to be reasoning and answer, `finish()` flushes what was held back.
The non-streaming split (`separate_reasoning`) is the same machine fed the whole text at once,
so a streamed response and a whole one always agree.

Tag formats, and what the machine guarantees:
- the opening tag counts only at the start of the output (after whitespace); a "forced" format
  (deepseek-r1, qwen3-thinking: the chat template already opened the thought) starts inside the
  reasoning, so an output without the opening tag is reasoning up to the closing tag;
- a tag split across pieces at any position is recognised: text that could still grow into a
  tag is held back until it can or cannot;
- reasoning that never closes (the output was cut short) is reasoning, flushed by `finish()`;
- formats with a `tool_start` (qwen3, glm45, kimi_k2) end the reasoning at a tool call that
  opens inside it, and leave the call in the answer for the tool parser;
- with `stream_reasoning=False` the reasoning is held and comes out in one piece when it closes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class ReasoningDelta:
    """What one `feed` or `finish` made known: new reasoning text and new answer text."""

    reasoning: str = ""
    content: str = ""

    def __add__(self, other: ReasoningDelta) -> ReasoningDelta:
        return ReasoningDelta(self.reasoning + other.reasoning, self.content + other.content)


class ReasoningParser(Protocol):
    """One output's streaming split. Invariant: the concatenation of every delta returned by
    `feed` and `finish` is the split of the concatenated input, whatever the piece boundaries."""

    def feed(self, text: str) -> ReasoningDelta: ...

    def finish(self) -> ReasoningDelta: ...


def held_suffix(text: str, markers: tuple[str, ...]) -> int:
    """Length of the longest ending of `text` that is a proper prefix of one of `markers`: the
    part that must wait for more text before it is known not to be a marker."""
    longest = 0
    for marker in markers:
        for k in range(min(len(text), len(marker) - 1), longest, -1):
            if marker.startswith(text[-k:]):
                longest = k
                break
    return longest


@dataclass(frozen=True)
class TagFormat:
    """Thinking between `start` and `end`. `forced`: the output begins inside the thinking (by
    default; `toggle`, a chat_template_kwargs switch such as enable_thinking, overrides it:
    False turns forcing off, True turns it on when `forced_when_on`)."""

    start: str
    end: str
    forced: bool = False
    tool_start: str | None = None
    toggle: str = "enable_thinking"
    forced_when_on: bool = False

    def is_forced(self, template_kwargs: Mapping[str, Any] | None) -> bool:
        switch = (template_kwargs or {}).get(self.toggle)
        if switch is None:
            return self.forced
        return bool(switch) and (self.forced or self.forced_when_on)


@dataclass
class TagReasoningStream:
    """The tag state machine: `_phase` is "open" (the output's start, where the opening tag may
    come), "thinking" or "answer"; `_held` is text received but not yet returned."""

    fmt: TagFormat
    forced: bool
    stream_reasoning: bool = True
    _phase: str = "open"
    _held: str = ""
    _markers: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        self._markers = tuple(m for m in (self.fmt.end, self.fmt.tool_start) if m)

    def feed(self, text: str) -> ReasoningDelta:
        self._held += text
        if self._phase == "open":
            body = self._held.lstrip()
            if self.fmt.start.startswith(body):
                return ReasoningDelta()  # nothing but whitespace or a piece of the opening tag yet
            if body.startswith(self.fmt.start):
                self._phase, self._held = "thinking", body[len(self.fmt.start) :]
            else:
                self._phase = "thinking" if self.forced else "answer"
        if self._phase == "thinking":
            return self._think()
        out, self._held = self._held, ""
        return ReasoningDelta(content=out)

    def _think(self) -> ReasoningDelta:
        ends = [(i, m) for m in self._markers if (i := self._held.find(m)) >= 0]
        if ends:
            i, marker = min(ends)
            reasoning, rest = self._held[:i], self._held[i:]
            if marker == self.fmt.end:
                rest = rest[len(marker) :]  # a tool_start stays: it belongs to the answer
            self._phase, self._held = "answer", ""
            return ReasoningDelta(reasoning, rest)
        if not self.stream_reasoning:
            return ReasoningDelta()
        keep = held_suffix(self._held, self._markers)
        out = self._held[: len(self._held) - keep]
        self._held = self._held[len(out) :]
        return ReasoningDelta(reasoning=out)

    def finish(self) -> ReasoningDelta:
        held, self._held = self._held, ""
        if self._phase == "open":
            body = held.lstrip()
            if body == self.fmt.start:
                return ReasoningDelta()  # an empty thought, cut short
            return ReasoningDelta(reasoning=held) if self.forced else ReasoningDelta(content=held)
        if self._phase == "thinking":
            return ReasoningDelta(reasoning=held)
        return ReasoningDelta(content=held)


_THINK = ("<think>", "</think>")
_QWEN = TagFormat(*_THINK, tool_start="<tool_call>")
_R1 = TagFormat(*_THINK, forced=True)

TAG_FORMATS: dict[str, TagFormat] = {
    "deepseek-r1": _R1,
    "step3": _R1,
    "step3p5": _R1,
    "gigachat35": _R1,
    "qwen3": _QWEN,
    "qwen3-thinking": TagFormat(*_THINK, forced=True, tool_start="<tool_call>"),
    "minimax": TagFormat(*_THINK, forced=True, tool_start="<tool_call>"),
    "interns1": _QWEN,
    "nanbeige": _QWEN,
    "dots": _QWEN,
    "glm45": _QWEN,
    "deepseek-v3": TagFormat(*_THINK, tool_start="<tool_call>", toggle="thinking", forced_when_on=True),
    "mimo": _QWEN,
    "kimi": TagFormat("◁think▷", "◁/think▷"),
    "kimi_k2": TagFormat(*_THINK, tool_start="<|tool_calls_section_begin|>"),
    "mistral": TagFormat("[THINK]", "[/THINK]"),
    "nemotron_3": _QWEN,
}
"""Upstream's tag-delimited formats by their `--reasoning-parser` names."""


def _tag_factory(fmt: TagFormat) -> Callable[[Mapping[str, Any] | None, bool], ReasoningParser]:
    return lambda kwargs, stream: TagReasoningStream(fmt, fmt.is_forced(kwargs), stream)


def _harmony_factory(kwargs: Mapping[str, Any] | None, stream: bool) -> ReasoningParser:
    from sglang.runtime.parsers.harmony import HarmonyReasoningStream

    return HarmonyReasoningStream(stream_reasoning=stream)


REASONING_PARSERS: dict[str, Callable[[Mapping[str, Any] | None, bool], ReasoningParser]] = {
    **{name: _tag_factory(fmt) for name, fmt in TAG_FORMATS.items()},
    "gpt-oss": _harmony_factory,
}
"""`--reasoning-parser` names -> factory(chat_template_kwargs, stream_reasoning)."""

KEEPS_SPECIAL_TOKENS = frozenset({"gpt-oss", "mistral"})
"""Parsers whose markers are special tokens in their models' vocabularies, which detokenizing
with skip_special_tokens (the default) would drop."""


def reasoning_parser(
    name: str, template_kwargs: Mapping[str, Any] | None = None, stream_reasoning: bool = True
) -> ReasoningParser:
    """A fresh parser for one output. Raises ValueError for a name not in `REASONING_PARSERS`."""
    try:
        factory = REASONING_PARSERS[name]
    except KeyError:
        known = ", ".join(sorted(REASONING_PARSERS))
        raise ValueError(f"unknown reasoning parser {name!r}; known: {known}") from None
    return factory(template_kwargs, stream_reasoning)


def separate_reasoning(text: str, name: str, template_kwargs: Mapping[str, Any] | None = None) -> ReasoningDelta:
    """The whole of `text` split by parser `name` (ValueError for an unknown name)."""
    parser = reasoning_parser(name, template_kwargs)
    return parser.feed(text) + parser.finish()
