"""gpt-oss's Harmony output as reasoning and answer (`--reasoning-parser gpt-oss`).

A Harmony reply is a run of messages, each `[<|start|>assistant]<|channel|>HEADER<|message|>BODY`
closed by `<|end|>`, `<|call|>` or `<|return|>` (or by the next message, or the end of output).
The `analysis` channel is reasoning; `final` and plain `commentary` are the answer; a message
addressed to a function (`to=functions.NAME` in its header) is a tool call, passed on verbatim
(header, body and closing marker) in the answer, where the gpt-oss tool parser reads it. Text
outside any message is answer too (a model that writes no Harmony at all). Like every
`ReasoningParser`, pieces may split markers anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

from sglang.runtime.parsers.reasoning import ReasoningDelta, held_suffix

START, CHANNEL, MESSAGE = "<|start|>", "<|channel|>", "<|message|>"
ENDS = ("<|end|>", "<|call|>", "<|return|>")
_OPENERS = (START, CHANNEL)


@dataclass
class HarmonyReasoningStream:
    """`_phase`: "outside" a message, in its "header", or in its "body"; `_kind` of the current
    body: "reasoning", "content" or "tool"."""

    stream_reasoning: bool = True
    _phase: str = "outside"
    _kind: str = "content"
    _held: str = ""
    _header: str = ""
    _reasoning: str = ""

    def feed(self, text: str) -> ReasoningDelta:
        self._held += text
        out = ReasoningDelta()
        while True:
            step, progressed = self._step()
            out += step
            if not progressed:
                break
        if self.stream_reasoning:
            return out
        self._reasoning += out.reasoning
        if self._kind == "reasoning":  # held until the thought closes
            return ReasoningDelta(content=out.content)
        reasoning, self._reasoning = self._reasoning, ""
        return ReasoningDelta(reasoning, out.content)

    def _step(self) -> tuple[ReasoningDelta, bool]:
        """Consume what can be consumed of `_held` up to the next phase change."""
        if self._phase == "header":
            i = self._held.find(MESSAGE)
            if i < 0:
                return ReasoningDelta(), False
            self._header += self._held[:i]
            self._held = self._held[i + len(MESSAGE) :]
            self._phase = "body"
            if "to=" in self._header:
                self._kind = "tool"
                return ReasoningDelta(content=self._header + MESSAGE), True
            channel = self._header.split(CHANNEL)[-1].split()[:1]
            self._kind = "reasoning" if channel == ["analysis"] else "content"
            return ReasoningDelta(), True
        stops = (*_OPENERS, *ENDS) if self._phase == "body" else _OPENERS
        found = [(i, m) for m in stops if (i := self._held.find(m)) >= 0]
        if not found:
            keep = held_suffix(self._held, stops)
            piece = self._held[: len(self._held) - keep]
            self._held = self._held[len(piece) :]
            return self._emit(piece), False
        i, marker = min(found)
        piece, self._held = self._held[:i], self._held[i + len(marker) :]
        out = self._emit(piece)
        if marker in ENDS:
            if self._kind == "tool":
                out += ReasoningDelta(content=marker)
            self._phase, self._kind = "outside", "content"
        else:
            if self._kind == "tool":
                out += ReasoningDelta(content=ENDS[1])  # a call cut off by the next message
            self._phase, self._header = "header", marker
        return out, True

    def _emit(self, piece: str) -> ReasoningDelta:
        if not piece:
            return ReasoningDelta()
        return ReasoningDelta(reasoning=piece) if self._kind == "reasoning" else ReasoningDelta(content=piece)

    def finish(self) -> ReasoningDelta:
        held, self._held = self._held, ""
        out = ReasoningDelta(self._reasoning)
        self._reasoning = ""
        if self._phase != "header":
            out += self._emit(held)
        return out
