"""Tool-call formats by upstream name: each one's fixtures parsed whole, and streamed split at
every position and one character at a time, must give the same content and the same calls; the
streamed deltas must have OpenAI's shape and send arguments as they are written."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sglang.runtime.parsers import TOOL_CALL_PARSERS, ToolCallStream, ToolDelta, parse_tool_calls, tool_format
from sglang.runtime.parsers.tool_formats import FORCED_FORMAT
from sglang.runtime.parsers.tool_stream import merge_calls

NAMES = frozenset({"get_weather", "get_time"})
WEATHER = {"city": "Paris", "unit": "C"}
DSV3 = "<｜tool▁call▁begin｜>function<｜tool▁sep｜>{name}\n```json\n{args}\n```<｜tool▁call▁end｜>"

# (parser, output, content, [(name, arguments)])
FIXTURES: list[tuple[str, str, str, list[tuple[str, dict[str, Any]]]]] = [
    ("hermes", 'Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "C"}}\n</tool_call>',
     "Sure.\n", [("get_weather", WEATHER)]),
    ("qwen25", '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>\n<tool_call>\n'
     '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "C"}}\n</tool_call>',
     "", [("get_time", {}), ("get_weather", WEATHER)]),
    ("llama3", '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris", "unit": "C"}}',
     "", [("get_weather", WEATHER)]),
    ("llama3", '{"name": "get_time", "parameters": {"tz": "UTC"}}; {"name": "get_time", "parameters": {}}',
     "", [("get_time", {"tz": "UTC"}), ("get_time", {})]),
    ("mistral", 'Checking. [TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris", "unit": "C"}}]',
     "Checking. ", [("get_weather", WEATHER)]),
    ("mistral", '[TOOL_CALLS]get_time[ARGS]{"tz": "CET"}[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "unit": "C"}',
     "", [("get_time", {"tz": "CET"}), ("get_weather", WEATHER)]),
    ("deepseekv3", "Let me look.<｜tool▁calls▁begin｜>"
     + DSV3.format(name="get_weather", args=json.dumps(WEATHER))
     + DSV3.format(name="get_time", args="{}") + "<｜tool▁calls▁end｜>",
     "Let me look.", [("get_weather", WEATHER), ("get_time", {})]),
    ("pythonic", '[get_weather(city="Paris", unit="C"), get_time()]', "", [("get_weather", WEATHER), ("get_time", {})]),
    ("pythonic", "<|python_start|>[get_time(tz='UTC')]<|python_end|>", "", [("get_time", {"tz": "UTC"})]),
    ("gpt-oss", '<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>'
     '{"city": "Paris", "unit": "C"}<|call|>', "", [("get_weather", WEATHER)]),
    # No call: the whole output is content, in every format.
    ("hermes", "Just text, a < b.", "Just text, a < b.", []),
    ("llama3", "Plain answer {not a call}", "Plain answer {not a call}", []),
    ("pythonic", "[1, 2, 3] is a list", "[1, 2, 3] is a list", []),
    ("mistral", "[TOOL_CALLS] [not json", "[TOOL_CALLS] [not json", []),
    ("deepseekv3", "No tools needed.", "No tools needed.", []),
    # Calls to functions that are not among the tools are dropped.
    ("hermes", '<tool_call>{"name": "launch", "arguments": {}}</tool_call>',
     '<tool_call>{"name": "launch", "arguments": {}}</tool_call>', []),
]  # fmt: skip


def _stream(fmt_name: str | None, pieces: list[str], forced: bool = False) -> tuple[list[ToolDelta], ToolDelta]:
    stream = ToolCallStream(FORCED_FORMAT if forced else tool_format(fmt_name), NAMES)
    deltas = [stream.feed(piece) for piece in pieces] + [stream.finish()]
    calls = [c for d in deltas for c in d.calls]
    return deltas, ToolDelta("".join(d.content for d in deltas), merge_calls(calls))


def _functions(calls: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


def test_the_required_upstream_names_are_registered() -> None:
    assert {"hermes", "llama3", "mistral", "qwen25", "deepseekv3", "pythonic", "gpt-oss"} <= set(TOOL_CALL_PARSERS)
    with pytest.raises(ValueError, match="unknown tool-call parser"):
        tool_format("nope")


@pytest.mark.parametrize(("name", "text", "content", "calls"), FIXTURES)
def test_whole_and_streamed_agree(name: str, text: str, content: str, calls: list[tuple[str, dict]]) -> None:
    whole = parse_tool_calls(text, NAMES, tool_format(name))
    assert whole.content == content and _functions(whole.calls) == calls
    assert all(c["id"].startswith("call_") and c["type"] == "function" for c in whole.calls)
    splits = [[text[:cut], text[cut:]] for cut in range(len(text) + 1)] + [list(text)]
    for pieces in splits:
        _, streamed = _stream(name, pieces)
        assert streamed.content == content, pieces
        assert _functions(streamed.calls) == calls, pieces


@pytest.mark.parametrize(("name", "text", "content", "calls"), [f for f in FIXTURES if f[3]])
def test_stream_deltas_have_openais_shape(name: str, text: str, content: str, calls: list[tuple[str, dict]]) -> None:
    deltas, _ = _stream(name, list(text))
    items = [c for d in deltas for c in d.calls]
    firsts = [c for c in items if "id" in c]
    assert [c["index"] for c in firsts] == list(range(len(calls)))
    assert all(c["type"] == "function" and c["function"]["arguments"] == "" for c in firsts)
    assert all(set(c) == {"index", "function"} and set(c["function"]) == {"arguments"} for c in items if "id" not in c)
    if name != "pythonic":  # JSON arguments stream as written; Python literals only whole
        pieces = [sum(1 for c in items if "id" not in c and c["index"] == k) for k in range(len(calls))]
        assert max(pieces) > 3
    sent = ""
    for d in deltas:  # content never includes a piece of the calls section
        sent += d.content
        assert content.startswith(sent)


def test_plain_json_of_forced_calls_streams_no_content() -> None:
    text = '[{"name": "get_weather", "arguments": {"city": "Paris", "unit": "C"}}, '
    text += '{"name": "get_time", "arguments": {}}]'
    deltas, streamed = _stream(None, list(text), forced=True)
    assert not any(d.content for d in deltas)
    assert _functions(streamed.calls) == [("get_weather", WEATHER), ("get_time", {})]


def test_arguments_given_as_a_json_string_come_out_whole() -> None:
    text = '<tool_call>{"name": "get_time", "arguments": "{\\"tz\\": \\"UTC\\"}"}</tool_call>'
    deltas, streamed = _stream("hermes", list(text))
    assert _functions(streamed.calls) == [("get_time", {"tz": "UTC"})]
    assert [c["function"]["arguments"] for d in deltas for c in d.calls if "id" not in c] == ['{"tz": "UTC"}']
