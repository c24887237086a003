"""The Responses API adapter without an engine: conversion of requests (and stored history) to
the chat path, output items and statuses, the streamed event order (reasoning and tool calls
through the real parsers), and the store. The official client over a real server is in
tests/e2e/test_responses_api.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from sglang.runtime.parsers import tool_format
from sglang.runtime.server.errors import ApiError
from sglang.runtime.server.openai.chat import ReasoningSplit, ToolParsing
from sglang.runtime.server.openai.protocol import NamedToolChoice
from sglang.runtime.server.output_split import split_output
from sglang.runtime.server.responses_api.convert import chat_request
from sglang.runtime.server.responses_api.events import EventStream
from sglang.runtime.server.responses_api.output import ResponseShell, assistant_message, output_items, status_of
from sglang.runtime.server.responses_api.protocol import ResponsesRequest
from sglang.runtime.server.responses_api.store import ResponseStore, StoredResponse

WEATHER = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}
TOOLS = ToolParsing(frozenset({"get_weather"}), forced=False, fmt=tool_format(None))
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
THINK = ReasoningSplit("qwen3", None, stream_reasoning=True)
"""The real reasoning parser: `<think>...</think>` before the answer."""


def request(**body: Any) -> ResponsesRequest:
    return ResponsesRequest.model_validate({"model": "m", "input": "hi", **body})


def output(text: str, finish: dict | None, tokens: int = 3) -> dict[str, Any]:
    meta = {"prompt_tokens": 5, "completion_tokens": tokens, "cached_tokens": 1, "finish_reason": finish}
    return {"text": text, "meta_info": meta}


def test_conversation_items_become_chat_messages() -> None:
    body = request(
        instructions="Be brief.",
        input=[
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "hm"}]},
            {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
            {"type": "function_call", "call_id": "call_2", "name": "get_weather", "arguments": '{"city": "Rome"}'},
            {"type": "function_call_output", "call_id": "call_1", "output": "Sunny"},
            {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "Rain"}]},
            {
                "type": "message",
                "role": "assistant",
                "id": "msg_1",
                "status": "completed",
                "content": [{"type": "output_text", "text": "Sunny and rain.", "annotations": []}],
            },
        ],
        max_output_tokens=7,
        tools=[WEATHER],
        tool_choice={"type": "function", "name": "get_weather"},
        text={"format": {"type": "json_schema", "name": "w", "schema": {"type": "object"}}},
        reasoning={"effort": "none"},
        top_k=3,
        stop=["END"],
    )
    history = [{"role": "user", "content": "Earlier."}, {"role": "assistant", "content": "Yes."}]
    chat, turn = chat_request(body, history)
    roles = [m.role for m in chat.messages]
    assert roles == ["system", "user", "assistant", "user", "assistant", "tool", "tool", "assistant"]
    assert chat.messages[0].content == "Be brief."
    calls = chat.messages[4].tool_calls
    assert [c.id for c in calls] == ["call_1", "call_2"]  # parallel calls: one assistant turn
    assert [m.content for m in chat.messages[5:]] == ["Sunny", "Rain", "Sunny and rain."]
    assert len(turn) == 5  # this turn's messages: not the instructions, not the history
    assert chat.max_completion_tokens == 7 and chat.top_k == 3 and chat.stop == ["END"]
    assert chat.tool_choice == NamedToolChoice.model_validate({"function": {"name": "get_weather"}})
    assert chat.response_format is not None and chat.response_format.type == "json_schema"
    assert chat.reasoning_effort == "none"


def test_logprobs_are_asked_through_include() -> None:
    plain, _ = chat_request(request(top_logprobs=2), [])
    assert not plain.logprobs
    asked, _ = chat_request(request(top_logprobs=2, include=["message.output_text.logprobs"]), [])
    assert asked.logprobs and asked.top_logprobs == 2


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input.0.content.0"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input.0"),
        ({"tools": [{"type": "web_search"}]}, "tools.0.type"),
        ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema"),
        ({"input": []}, "input"),
    ],
)
def test_refusals_name_the_field(body: dict[str, Any], param: str) -> None:
    with pytest.raises(ApiError) as refused:
        chat_request(request(**body), [])
    assert refused.value.status == 400 and refused.value.param == param


def test_unknown_fields_are_rejected() -> None:
    with pytest.raises(ValueError):
        request(temprature=0.5)


def test_output_items_and_status() -> None:
    turn = split_output(f"<think>Paris is in France.</think>Checking.{CALL}", TOOLS, THINK)
    assert turn.reasoning == "Paris is in France." and turn.text == "Checking."
    items = output_items(turn, "completed", None)
    assert [i["type"] for i in items] == ["reasoning", "message", "function_call"]
    assert items[0]["content"] == [{"type": "reasoning_text", "text": "Paris is in France."}]
    assert json.loads(items[2]["arguments"]) == {"city": "Paris"}
    assert items[2]["call_id"].startswith("call_") and items[2]["id"].startswith("fc_")
    assert assistant_message(turn)["tool_calls"][0]["function"]["name"] == "get_weather"
    only_call = output_items(split_output(CALL, TOOLS, None), "completed", None)
    assert [i["type"] for i in only_call] == ["function_call"]
    assert status_of(output("x", {"type": "length"})["meta_info"]) == "incomplete"
    assert status_of(output("x", {"type": "stop"})["meta_info"]) == "completed"
    with pytest.raises(ApiError):
        status_of(output("x", {"type": "abort", "message": "no room", "status_code": 400})["meta_info"])


def _stream(tools: ToolParsing | None, reasoning: ReasoningSplit | None, pieces: list[str], finish: dict) -> Any:
    stream = EventStream(ResponseShell("resp_1", "m", request()), tools, reasoning, lambda text: len(text.split()))
    events, text = [], ""
    for i, piece in enumerate(pieces):
        text += piece
        events += stream.update(output(text, finish if i == len(pieces) - 1 else None, tokens=i + 1))
    return stream, events


def test_stream_event_order_with_reasoning_text_and_a_call() -> None:
    pieces = ["<think>Paris", " is sunny</think>Look", "ing.", CALL[:20], CALL[20:]]
    stream, events = _stream(TOOLS, THINK, pieces, {"type": "stop"})
    kinds = [e["type"] for e in events]
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.reasoning_text.delta",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * (kinds.count("response.output_text.delta")),
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert deltas == "Looking."  # the call's text was held back, never sent as text
    final = stream.final
    assert final is not None and final["status"] == "completed"
    assert [i["type"] for i in final["output"]] == ["reasoning", "message", "function_call"]
    assert final["output"][1]["content"][0]["text"] == "Looking."
    assert final["usage"]["output_tokens_details"]["reasoning_tokens"] == 3
    # The whole output split at once gives the same items.
    whole = split_output("".join(pieces), TOOLS, THINK)
    assert (whole.reasoning, whole.text) == (stream.turn.reasoning, stream.turn.text)
    assert [c["function"] for c in whole.calls] == [c["function"] for c in stream.turn.calls]


def test_stream_logprobs_follow_the_text_deltas() -> None:
    """Each text delta carries the entries of the tokens since the previous one; those of text
    held back (a possible call that was not one) go with the next delta, and `.done` has all."""
    issued: list[dict[str, str]] = []

    def new(meta: dict[str, Any]) -> list[Any]:  # one entry per output token, named by its index
        added = [{"token": str(i)} for i in range(len(issued), meta["completion_tokens"])]
        issued.extend(added)
        return added

    stream = EventStream(ResponseShell("resp_1", "m", request()), TOOLS, None, len, new)
    text, events = "", []
    pieces = ["Hello", " <tool", "_cal", "l> no", "pe."]  # held back until it cannot be a call
    for i, piece in enumerate(pieces):
        text += piece
        events += stream.update(output(text, {"type": "stop"} if i == len(pieces) - 1 else None, tokens=i + 1))
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    assert "".join(e["delta"] for e in deltas) == "".join(pieces)
    sent = [entry["token"] for e in deltas for entry in e["logprobs"]]
    assert sent == ["0", "1", "2", "3", "4"]
    (done,) = [e for e in events if e["type"] == "response.output_text.done"]
    assert [entry["token"] for entry in done["logprobs"]] == sent
    assert stream.final is not None and stream.final["output"][0]["content"][0]["logprobs"] == done["logprobs"]


def test_stream_of_nothing_still_has_a_message_and_an_incomplete_end() -> None:
    _, events = _stream(None, None, [""], {"type": "length"})
    kinds = [e["type"] for e in events]
    assert "response.output_text.done" in kinds and kinds[-1] == "response.incomplete"
    assert events[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert events[-1]["response"]["output"][0]["status"] == "incomplete"


def test_store_keeps_the_newest_and_refuses_when_disabled() -> None:
    store = ResponseStore(enabled=True, capacity=2)
    for name in ("a", "b", "c"):
        store.put(name, StoredResponse({"id": name}, []))
    assert list(store.entries) == ["b", "c"]
    with pytest.raises(ApiError) as missing:
        store.get("a", "previous_response_id")
    assert missing.value.status == 404 and missing.value.param == "previous_response_id"
    store.delete("b")
    assert list(store.entries) == ["c"]
    with pytest.raises(ApiError) as disabled:
        ResponseStore(enabled=False).get("c")
    assert disabled.value.status == 400 and "--enable-response-store" in disabled.value.message
