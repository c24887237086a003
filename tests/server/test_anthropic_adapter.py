"""The Anthropic Messages adapter without an engine: conversion of requests to the chat path,
content blocks and stop reasons of outputs, the streamed event order (tool calls and thinking
included, through the real reasoning and tool-call parsers), and the error shape. The official
client over a real server is in tests/clients/test_api_clients.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from sglang.runtime.parsers import tool_format
from sglang.runtime.server.anthropic.content import EventStream, content_blocks
from sglang.runtime.server.anthropic.convert import chat_request
from sglang.runtime.server.anthropic.protocol import CountTokensRequest, MessagesRequest
from sglang.runtime.server.anthropic.responses import anthropic_error_body, stop_reason
from sglang.runtime.server.errors import ApiError
from sglang.runtime.server.openai.chat import ReasoningSplit, ToolParsing
from sglang.runtime.server.openai.protocol import NamedToolChoice

WEATHER = {"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}
TOOLS = ToolParsing(frozenset({"get_weather"}), forced=False, fmt=tool_format(None))
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def messages(**body: Any) -> MessagesRequest:
    return MessagesRequest.model_validate({"model": "m", "max_tokens": 8, **body})


def output(text: str, finish: dict | None = None, tokens: int = 3) -> dict[str, Any]:
    meta = {"prompt_tokens": 5, "completion_tokens": tokens, "cached_tokens": 1, "finish_reason": finish}
    return {"text": text, "meta_info": meta}


# The real reasoning parser: `<think>...</think>` before the answer (its state machine is tested
# with tags split at every position in tests/parsers).
THINK = ReasoningSplit("qwen3", None, stream_reasoning=True)


def test_conversion_of_a_conversation_with_tools() -> None:
    body = messages(
        system=[{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Be kind.", "cache_control": {}}],
        tools=[WEATHER],
        tool_choice={"type": "any", "disable_parallel_tool_use": True},
        stop_sequences=["END"],
        temperature=0.5,
        top_k=3,
        messages=[
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "s"},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "Sunny"}]},
                    {"type": "text", "text": "Thanks"},
                ],
            },
        ],
    )
    chat = chat_request(body)
    assert [(m.role, m.text()) for m in chat.messages] == [
        ("system", "Be brief.\nBe kind."),
        ("user", "Weather in Paris?"),
        ("assistant", ""),
        ("tool", "Sunny"),
        ("user", "Thanks"),
    ]
    (call,) = chat.messages[2].tool_calls or []
    assert (call.id, call.function.name, json.loads(call.function.arguments)) == (
        "toolu_1",
        "get_weather",
        {"city": "Paris"},
    )
    assert chat.messages[3].tool_call_id == "toolu_1"
    assert chat.tool_choice == "required" and chat.parallel_tool_calls is False
    assert chat.tools and chat.tools[0].function.parameters == WEATHER["input_schema"]
    assert (chat.stop, chat.temperature, chat.top_k, chat.max_tokens) == (["END"], 0.5, 3, 8)


def test_tool_choice_mapping_and_count_tokens_request() -> None:
    named = chat_request(
        messages(
            messages=[{"role": "user", "content": "x"}],
            tools=[WEATHER],
            tool_choice={"type": "tool", "name": "get_weather"},
        )
    )
    assert isinstance(named.tool_choice, NamedToolChoice) and named.tool_choice.function.name == "get_weather"
    count = chat_request(
        CountTokensRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": "x"}]})
    )
    assert count.max_tokens is None


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ([{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}], "text-only"),
        ([{"type": "tool_result", "tool_use_id": "t", "content": [{"type": "document", "source": {}}]}], "text-only"),
        ([{"type": "tool_use", "id": "t", "name": "get_weather", "input": {}}], "assistant turns"),
    ],
)
def test_refusals_say_why(content: list[dict], why: str) -> None:
    with pytest.raises(ApiError, match=why) as refused:
        chat_request(messages(messages=[{"role": "user", "content": content}]))
    assert refused.value.status == 400


def test_stop_reasons() -> None:
    assert stop_reason(output("", {"type": "length"})["meta_info"], [], False) == ("max_tokens", None)
    assert stop_reason(output("", {"type": "stop", "matched": "END"})["meta_info"], ["END"], False) == (
        "stop_sequence",
        "END",
    )
    assert stop_reason(output("", {"type": "stop", "matched": 2})["meta_info"], ["END"], False) == ("end_turn", None)
    assert stop_reason(output("", {"type": "stop", "matched": 2})["meta_info"], [], True) == ("tool_use", None)
    with pytest.raises(ApiError):
        stop_reason(output("", {"type": "abort", "message": "x"})["meta_info"], [], False)


def test_content_blocks() -> None:
    assert content_blocks("Hi", None, None) == ([{"type": "text", "text": "Hi"}], False)
    blocks, called = content_blocks("Let me see. " + CALL, TOOLS, None)
    assert called and blocks[0] == {"type": "text", "text": "Let me see."}
    assert blocks[1]["type"] == "tool_use" and blocks[1]["input"] == {"city": "Paris"}
    assert blocks[1]["id"].startswith("toolu_")
    blocks, _ = content_blocks("<think>plan</think>Answer", None, THINK)
    assert [b["type"] for b in blocks] == ["thinking", "text"] and blocks[0]["thinking"] == "plan"


def _events(stream: EventStream, pieces: list[str], finish: dict) -> list[dict[str, Any]]:
    text, events = "", []
    for k, piece in enumerate(pieces):
        text += piece
        events += stream.update(output(text, finish if k == len(pieces) - 1 else None, tokens=k + 1))
    return events


def test_stream_event_order_with_thinking_text_and_a_tool_call() -> None:
    stream = EventStream("m", TOOLS, [], THINK)
    pieces = ["<think>plan", " more</think>", "Sure. ", CALL[:15], CALL[15:]]
    events = _events(stream, pieces, {"type": "stop", "matched": 2})
    kinds = [(e["type"], e.get("delta", {}).get("type") or e.get("content_block", {}).get("type")) for e in events]
    assert kinds == [
        ("message_start", None),
        ("ping", None),
        ("content_block_start", "thinking"),
        ("content_block_delta", "thinking_delta"),
        ("content_block_delta", "thinking_delta"),
        ("content_block_delta", "signature_delta"),
        ("content_block_stop", None),
        ("content_block_start", "text"),
        ("content_block_delta", "text_delta"),
        ("content_block_stop", None),
        ("content_block_start", "tool_use"),
        ("content_block_delta", "input_json_delta"),
        ("content_block_stop", None),
        ("message_delta", None),
        ("message_stop", None),
    ]
    assert [e["index"] for e in events if "index" in e] == [0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 2]
    text = "".join(e["delta"].get("text", "") for e in events if e["type"] == "content_block_delta")
    assert text == "Sure. "  # the call's text never leaks into the text block
    assert json.loads(events[11]["delta"]["partial_json"]) == {"city": "Paris"}
    assert events[-2]["delta"]["stop_reason"] == "tool_use" and events[-2]["usage"] == {"output_tokens": 5}
    assert events[0]["message"]["usage"]["input_tokens"] == 5


def test_stream_of_nothing_still_has_a_text_block() -> None:
    events = EventStream("m", None, ["END"], None).update(output("", {"type": "stop", "matched": "END"}))
    assert [e["type"] for e in events][2:] == [
        "content_block_start",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert events[-2]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "END"}


def test_error_shape() -> None:
    assert anthropic_error_body(400, "bad", "x") == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "bad"},
    }
    assert anthropic_error_body(401, "k")["error"]["type"] == "authentication_error"
    assert anthropic_error_body(503, "busy")["error"]["type"] == "overloaded_error"
    assert anthropic_error_body(500, "oops")["error"]["type"] == "api_error"
