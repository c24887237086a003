"""Reasoning parsers: every upstream name they claim, fed whole and in pieces split at every
position (so every tag is cut at every one of its characters), must give the same split."""

from __future__ import annotations

from typing import Any

import pytest

from sglang.runtime.parsers import REASONING_PARSERS, ReasoningDelta, reasoning_parser, separate_reasoning
from sglang.runtime.parsers.reasoning import TAG_FORMATS

HARMONY = (
    "<|channel|>analysis<|message|>Think: 2+2.<|end|><|start|>assistant<|channel|>final<|message|>It is 4.<|return|>"
)
HARMONY_CALL = (
    "<|channel|>analysis<|message|>Need the weather.<|end|>"
    '<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Oslo"}'
    "<|call|>"
)

# (parser, output, chat_template_kwargs, reasoning, content)
CASES: list[tuple[str, str, dict[str, Any] | None, str, str]] = [
    ("deepseek-r1", "<think>Let me see.</think>The answer.", None, "Let me see.", "The answer."),
    ("deepseek-r1", "No opening tag.</think>Answer", None, "No opening tag.", "Answer"),  # R1: template opened it
    ("deepseek-r1", "Cut off while thinking", None, "Cut off while thinking", ""),  # never closes
    ("deepseek-r1", "\n<think>\nx\n</think>\n\ny", None, "\nx\n", "\n\ny"),
    ("deepseek-r1", "plain", {"enable_thinking": False}, "", "plain"),
    ("qwen3", "<think>hmm</think>Paris.", None, "hmm", "Paris."),
    ("qwen3", "Paris, no thought.", None, "", "Paris, no thought."),
    ("qwen3", "Paris < think > </think>", None, "", "Paris < think > </think>"),  # tags count at the start only
    ("qwen3", '<think>I will call<tool_call>{"name": "f"}', None, "I will call", '<tool_call>{"name": "f"}'),
    ("qwen3", "<think>never closes", None, "never closes", ""),
    ("qwen3-thinking", "thinking</think>done", None, "thinking", "done"),
    ("glm45", "<think>a</think>b", None, "a", "b"),
    ("kimi", "◁think▷deep◁/think▷shallow", None, "deep", "shallow"),
    ("mistral", "[THINK]plan[/THINK]act", None, "plan", "act"),
    ("deepseek-v3", "no thinking asked", None, "", "no thinking asked"),
    ("deepseek-v3", "asked</think>yes", {"thinking": True}, "asked", "yes"),
    ("kimi_k2", "<think>go<|tool_calls_section_begin|>x", None, "go", "<|tool_calls_section_begin|>x"),
    ("gpt-oss", HARMONY, None, "Think: 2+2.", "It is 4."),
    ("gpt-oss", "<|channel|>analysis<|message|>cut", None, "cut", ""),
    ("gpt-oss", "No harmony at all", None, "", "No harmony at all"),
    (
        "gpt-oss",
        HARMONY_CALL,
        None,
        "Need the weather.",
        HARMONY_CALL[HARMONY_CALL.index("<|start|>") :],  # the call, verbatim, for the tool parser
    ),
]


def _fed(name: str, pieces: list[str], kwargs: dict[str, Any] | None, stream: bool = True) -> list[ReasoningDelta]:
    parser = reasoning_parser(name, kwargs, stream)
    return [parser.feed(piece) for piece in pieces] + [parser.finish()]


def _total(deltas: list[ReasoningDelta]) -> ReasoningDelta:
    out = ReasoningDelta()
    for delta in deltas:
        out += delta
    return out


def test_the_required_upstream_names_are_registered() -> None:
    required = {"deepseek-r1", "qwen3", "qwen3-thinking", "kimi", "gpt-oss", "glm45"}
    assert required <= set(REASONING_PARSERS)
    with pytest.raises(ValueError, match="unknown reasoning parser"):
        reasoning_parser("nope")


@pytest.mark.parametrize(("name", "text", "kwargs", "reasoning", "content"), CASES)
def test_whole_and_split_at_every_position(
    name: str, text: str, kwargs: dict[str, Any] | None, reasoning: str, content: str
) -> None:
    assert separate_reasoning(text, name, kwargs) == ReasoningDelta(reasoning, content)
    for cut in range(len(text) + 1):
        assert _total(_fed(name, [text[:cut], text[cut:]], kwargs)) == ReasoningDelta(reasoning, content), cut
    for cut in range(0, len(text), 3):  # three pieces: a tag may straddle both cuts
        pieces = [text[:cut], text[cut : cut + 4], text[cut + 4 :]]
        assert _total(_fed(name, pieces, kwargs)) == ReasoningDelta(reasoning, content), cut
    one_char = _fed(name, list(text), kwargs)
    assert _total(one_char) == ReasoningDelta(reasoning, content)
    assert _total(_fed(name, list(text), kwargs, stream=False)) == ReasoningDelta(reasoning, content)


@pytest.mark.parametrize("name", sorted(TAG_FORMATS))
def test_no_piece_of_a_tag_leaks(name: str) -> None:
    fmt = TAG_FORMATS[name]
    text = f"{fmt.start}abc{fmt.end}xyz"  # no tag has any of these letters
    deltas = _fed(name, list(text), None)
    assert all(set(d.reasoning + d.content) <= set("abcxyz") for d in deltas)
    assert _total(deltas) == ReasoningDelta("abc", "xyz")


def test_reasoning_streams_as_it_comes_and_holds_only_what_may_be_a_tag() -> None:
    deltas = _fed("deepseek-r1", ["<think>one ", "two </", "think> three"], None)
    assert [d.reasoning for d in deltas] == ["one ", "two ", "", ""]
    assert [d.content for d in deltas] == ["", "", " three", ""]
    kept = _fed("deepseek-r1", ["one </thin", "k>"], None)
    assert kept[0].reasoning == "one " and kept[1] == ReasoningDelta("", "")


def test_stream_reasoning_false_sends_the_thought_whole_when_it_closes() -> None:
    deltas = _fed("qwen3", ["<think>a", "b", "c</think>d", "e"], None, stream=False)
    assert [d.reasoning for d in deltas] == ["", "", "abc", "", ""]
    assert "".join(d.content for d in deltas) == "de"
    unclosed = _fed("deepseek-r1", ["never", " closes"], None, stream=False)
    assert [d.reasoning for d in unclosed] == ["", "", "never closes"]
    harmony = _fed("gpt-oss", list(HARMONY), None, stream=False)
    assert [d.reasoning for d in harmony if d.reasoning] == ["Think: 2+2."]
