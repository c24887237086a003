"""Reasoning and tool-call parsers on a real server: `--reasoning-parser deepseek-r1
--tool-call-parser qwen25`, the embedded model, the official openai client. Only this module's
server is used: a test on the session's (parametrized) shared server would let pytest reorder
this module's tests around it and start this server twice.

The small model does not think in tags by itself, so the outputs that must contain reasoning or
a Hermes-style call are scripted with a constraint: SGLang's `regex` field makes the real model
write exactly the given text through xgrammar (nothing in the server is test-only). The
`tool_choice` tests constrain nothing by hand: "required" and named choices must always give a
call that parses and validates, here sampled at temperature 1 under several seeds.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import jsonschema
import openai
import pytest

from sglang.ci.servers import REQUEST_TIMEOUT_S, RunningServer

THOUGHT, ANSWER = "Two and two make four.", "The answer is 4."
ASK = [{"role": "user", "content": "What is 2+2?"}]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 12}},
            "required": ["city"],
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {"type": "object", "properties": {"tz": {"type": "string", "maxLength": 8}}, "required": ["tz"]},
    },
}


@pytest.fixture(scope="module")
def parsing(server_factory: Callable[..., RunningServer]) -> RunningServer:
    flags = ("--reasoning-parser", "deepseek-r1", "--tool-call-parser", "qwen25", "--max-total-tokens", "4096")
    return server_factory(*flags)


@pytest.fixture(scope="module")
def client(parsing: RunningServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=parsing.url + "/v1", api_key="none", timeout=REQUEST_TIMEOUT_S) as client:
        yield client


def scripted(text: str) -> dict[str, Any]:
    """Request fields that make the model write exactly `text`."""
    return {"extra_body": {"regex": re.escape(text)}, "max_completion_tokens": 80, "temperature": 0}


def chat(client: openai.OpenAI, **fields: Any) -> Any:
    return client.chat.completions.create(model="default", messages=fields.pop("messages", ASK), **fields)


def streamed(client: openai.OpenAI, **fields: Any) -> tuple[str, str, list[Any], str | None]:
    """(reasoning, content, tool-call deltas, finish reason) of a streamed chat."""
    reasoning, content, calls, reason = "", "", [], None
    for chunk in chat(client, stream=True, **fields):
        for choice in chunk.choices:
            delta = choice.delta
            reasoning += getattr(delta, "reasoning_content", None) or ""
            content += delta.content or ""
            calls += delta.tool_calls or []
            reason = choice.finish_reason or reason
    return reasoning, content, calls, reason


@pytest.mark.parametrize("opened", [True, False], ids=["think-tag", "r1-no-opening-tag"])
def test_reasoning_content_whole_and_streamed(client: openai.OpenAI, opened: bool) -> None:
    text = ("<think>" if opened else "") + f"{THOUGHT}</think>{ANSWER}"
    message = chat(client, **scripted(text)).choices[0].message
    assert message.reasoning_content == THOUGHT and message.content == ANSWER
    reasoning, content, _, reason = streamed(client, **scripted(text))
    assert (reasoning, content, reason) == (THOUGHT, ANSWER, "stop")


def test_reasoning_switches(client: openai.OpenAI) -> None:
    text = f"<think>{THOUGHT}</think>{ANSWER}"
    whole = chat(client, **scripted(text) | {"extra_body": {"regex": re.escape(text), "separate_reasoning": False}})
    assert whole.choices[0].message.content == text
    assert getattr(whole.choices[0].message, "reasoning_content", None) is None
    # stream_reasoning false: the thought arrives in one delta, once it is closed.
    pieces = []
    fields = scripted(text) | {"extra_body": {"regex": re.escape(text), "stream_reasoning": False}}
    for chunk in chat(client, stream=True, **fields):
        pieces += [c.delta.reasoning_content for c in chunk.choices if getattr(c.delta, "reasoning_content", None)]
    assert pieces == [THOUGHT]
    # enable_thinking false: R1's output does not start inside a thought, so it is all answer.
    plain = "Just the answer."
    kwargs = {"chat_template_kwargs": {"enable_thinking": False}}
    message = chat(client, **scripted(plain) | {"extra_body": {"regex": re.escape(plain), **kwargs}}).choices[0].message
    assert message.content == plain and message.reasoning_content is None


def test_reasoning_then_a_tool_call_in_the_configured_format(client: openai.OpenAI) -> None:
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    text = f"<think>I need the weather.</think>{call}"
    out = chat(client, tools=[WEATHER], **scripted(text)).choices[0]
    assert out.finish_reason == "tool_calls" and out.message.reasoning_content == "I need the weather."
    assert not out.message.content
    assert [(c.function.name, json.loads(c.function.arguments)) for c in out.message.tool_calls] == [
        ("get_weather", {"city": "Oslo"})
    ]
    reasoning, content, calls, reason = streamed(client, tools=[WEATHER], **scripted(text))
    assert (reasoning, content, reason) == ("I need the weather.", "", "tool_calls")
    assert calls[0].id and calls[0].function.name == "get_weather"
    assert json.loads("".join(c.function.arguments or "" for c in calls)) == {"city": "Oslo"}


def test_responses_api_items_of_reasoning_text_and_a_call(client: openai.OpenAI) -> None:
    """The Responses API reads the output with the same parsers: a reasoning item, the answer,
    a function call item, whole and streamed."""
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    text = f"<think>{THOUGHT}</think>{ANSWER}{call}"
    fields = {"model": "default", "input": "What is 2+2?", "temperature": 0, "max_output_tokens": 80}
    fields |= {"tools": [{"type": "function", **WEATHER["function"]}], "extra_body": {"regex": re.escape(text)}}
    whole = client.responses.create(**fields)
    assert [item.type for item in whole.output] == ["reasoning", "message", "function_call"]
    assert whole.output[0].content[0].text == THOUGHT and whole.output_text == ANSWER
    assert json.loads(whole.output[2].arguments) == {"city": "Oslo"}
    assert whole.usage.output_tokens_details.reasoning_tokens > 0
    events = list(client.responses.create(**fields, stream=True))
    thought = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    answer = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert (thought, answer) == (THOUGHT, ANSWER)
    assert [item.type for item in events[-1].response.output] == ["reasoning", "message", "function_call"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_tool_choice_required_always_parses(client: openai.OpenAI, stream: bool) -> None:
    prompts = ["What is the weather in Paris?", "What time is it in Tokyo?", "Tell me a joke."]
    for seed, prompt in enumerate(prompts):
        fields = {
            "messages": [{"role": "user", "content": prompt}],
            "tools": [WEATHER, TIME],
            "tool_choice": "required",
        }
        fields |= {"temperature": 1.0, "seed": seed, "max_completion_tokens": 80}
        calls: dict[int, list[str]] = {}
        if stream:
            _, _, deltas, reason = streamed(client, **fields)
            for d in deltas:
                entry = calls.setdefault(d.index, [d.function.name or "", ""])
                entry[1] += d.function.arguments or ""
        else:
            choice = chat(client, **fields).choices[0]
            reason = choice.finish_reason
            for k, call in enumerate(choice.message.tool_calls or []):
                calls[k] = [call.function.name, call.function.arguments]
        assert reason == "tool_calls" and calls, (prompt, calls)
        for name, arguments in calls.values():
            tool = {"get_weather": WEATHER, "get_time": TIME}[name]
            jsonschema.validate(json.loads(arguments), tool["function"]["parameters"])


def test_tool_choice_named_and_none(client: openai.OpenAI) -> None:
    named = {"type": "function", "function": {"name": "get_time"}}
    fields = {"tools": [WEATHER, TIME], "temperature": 1.0, "seed": 7, "max_completion_tokens": 60}
    choice = chat(client, tool_choice=named, **fields).choices[0]
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_time"
    jsonschema.validate(json.loads(call.function.arguments), TIME["function"]["parameters"])
    call = '<tool_call>\n{"name": "get_time", "arguments": {"tz": "UTC"}}\n</tool_call>'
    fields = scripted(f"<think>No tools.</think>{call}") | {"tools": [TIME], "tool_choice": "none"}
    choice = chat(client, **fields).choices[0]  # "none": a call-shaped answer stays text
    assert choice.finish_reason == "stop" and not choice.message.tool_calls and choice.message.content == call


def test_native_parsing_routes(parsing: RunningServer) -> None:
    with httpx.Client(base_url=parsing.url, timeout=30) as http:
        body = {"text": "<think>a</think>b", "reasoning_parser": "qwen3", "return_blocks": True}
        out = http.post("/separate_reasoning", json=body).json()
        assert (out["reasoning_text"], out["text"]) == ("a", "b")
        assert out["blocks"] == [{"type": "reasoning", "text": "a"}, {"type": "text", "text": "b"}]
        bad = http.post("/separate_reasoning", json={"text": "x", "reasoning_parser": "nope"})
        assert bad.status_code == 400 and "nope" in bad.json()["error"]["message"]
        body = {"text": '[get_time(tz="CET")]', "tool_call_parser": "pythonic", "tools": [WEATHER, TIME]}
        out = http.post("/parse_function_call", json=body).json()
        assert out["normal_text"] == "" and out["calls"] == [
            {"tool_index": 1, "name": "get_time", "parameters": '{"tz": "CET"}'}
        ]
        assert http.post("/parse_function_call", json={"text": "x", "tool_call_parser": "nope"}).status_code == 400
