"""OpenAI's Responses API through the official `openai` client against a real server started
with `--enable-response-store`: answers, token counts, the prompt (the same greedy text as the
chat route on the same conversation, chained turns included), the streamed events, a function
call round trip, background responses (polled, cancelled), and the store's errors. Reasoning
items are tested on the parsers' server (tests/e2e/test_parsers_server.py); the adapter's pure
parts in tests/server/test_responses_adapter.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest

from sglang.ci.servers import REQUEST_TIMEOUT_S, RunningServer

QUESTION = "What is the capital of France?"
GREEDY = {"temperature": 0, "max_output_tokens": 24}
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "enum": ["Paris", "Berlin"]}},
        "required": ["city"],
    },
}


@pytest.fixture(scope="module")
def stored(server_factory: Callable[..., RunningServer]) -> RunningServer:
    return server_factory("--enable-response-store", "--max-total-tokens", "4096")


@pytest.fixture(scope="module")
def client(stored: RunningServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=stored.url + "/v1", api_key="none", timeout=REQUEST_TIMEOUT_S, max_retries=0) as c:
        yield c


def chat_text(client: openai.OpenAI, messages: list[dict[str, Any]]) -> str:
    reply = client.chat.completions.create(model="default", messages=messages, temperature=0, max_tokens=24)
    return reply.choices[0].message.content or ""


def test_an_answer_with_its_token_counts(client: openai.OpenAI) -> None:
    response = client.responses.create(model="default", input=QUESTION, **GREEDY)
    assert response.id.startswith("resp_") and response.object == "response"
    assert response.status in ("completed", "incomplete") and response.output_text
    usage = response.usage
    assert usage is not None and 0 < usage.output_tokens <= 24
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    assert response.output[0].type == "message" and response.output[0].role == "assistant"


def test_prompts_are_the_chat_routes_chained_turns_included(client: openai.OpenAI) -> None:
    first = client.responses.create(model="default", input=QUESTION, instructions="Answer briefly.", **GREEDY)
    asked = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": QUESTION}]
    assert first.output_text == chat_text(client, asked)
    # A chained turn sees the earlier turns but not their instructions, as OpenAI's API does.
    second = client.responses.create(model="default", input="And of Germany?", previous_response_id=first.id, **GREEDY)
    history = [
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": first.output_text},
        {"role": "user", "content": "And of Germany?"},
    ]
    assert second.output_text == chat_text(client, history)
    assert second.previous_response_id == first.id
    assert client.responses.retrieve(second.id).output_text == second.output_text


def test_streamed_events_add_up_to_the_whole(client: openai.OpenAI) -> None:
    fields = {"model": "default", "input": QUESTION, "temperature": 0, "max_output_tokens": 12}
    whole = client.responses.create(**fields, extra_body={"ignore_eos": True})
    events = list(client.responses.create(**fields, stream=True, extra_body={"ignore_eos": True}))
    kinds = [event.type for event in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.incomplete",  # ignore_eos: the token limit ends it
    ]
    assert [event.sequence_number for event in events] == list(range(len(events)))
    deltas = "".join(event.delta for event in events if event.type == "response.output_text.delta")
    final = events[-1].response
    assert deltas == final.output_text == whole.output_text
    assert final.incomplete_details is not None and final.incomplete_details.reason == "max_output_tokens"
    assert final.usage is not None and final.usage.output_tokens == 12
    assert client.responses.retrieve(final.id).output_text == deltas


def test_logprobs_whole_and_streamed(client: openai.OpenAI) -> None:
    fields = {"model": "default", "input": QUESTION, "temperature": 0, "max_output_tokens": 8, "top_logprobs": 2}
    fields |= {"include": ["message.output_text.logprobs"], "extra_body": {"ignore_eos": True}}
    whole = client.responses.create(**fields).output[0].content[0].logprobs
    assert len(whole) == 8 and all(len(entry.top_logprobs) == 2 for entry in whole)
    assert all(entry.logprob >= entry.top_logprobs[-1].logprob for entry in whole)
    events = list(client.responses.create(**fields, stream=True))
    streamed = [entry for e in events if e.type == "response.output_text.delta" for entry in e.logprobs]
    assert [(e.token, e.logprob) for e in streamed] == [(e.token, e.logprob) for e in whole]
    plain = client.responses.create(model="default", input=QUESTION, max_output_tokens=4, top_logprobs=2)
    assert plain.output[0].content[0].logprobs == []  # not asked for through `include`


def test_a_function_call_round_trip(client: openai.OpenAI) -> None:
    forced = {"type": "function", "name": "get_weather"}
    called = client.responses.create(
        model="default", input="What is the weather in Paris?", tools=[WEATHER], tool_choice=forced, temperature=0
    )
    (call,) = called.output
    assert call.type == "function_call" and call.name == "get_weather"
    assert json.loads(call.arguments)["city"] in ("Paris", "Berlin")
    result = {"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 25 C"}
    answered = client.responses.create(
        model="default", input=[result], previous_response_id=called.id, tools=[WEATHER], **GREEDY
    )
    assert answered.status in ("completed", "incomplete")
    assert [item.type for item in answered.output] in (["message"], ["function_call"])


def _settled(client: openai.OpenAI, response_id: str) -> Any:
    deadline = time.monotonic() + REQUEST_TIMEOUT_S
    while time.monotonic() < deadline:
        response = client.responses.retrieve(response_id)
        if response.status not in ("queued", "in_progress"):
            return response
        time.sleep(0.1)
    raise AssertionError(f"background response {response_id} still running")


def test_background_responses_finish_or_cancel(client: openai.OpenAI) -> None:
    queued = client.responses.create(model="default", input=QUESTION, background=True, **GREEDY)
    assert queued.status == "queued" and queued.background
    done = _settled(client, queued.id)
    assert done.output_text == client.responses.create(model="default", input=QUESTION, **GREEDY).output_text
    long = client.responses.create(
        model="default", input=QUESTION, background=True, max_output_tokens=3000, extra_body={"ignore_eos": True}
    )
    cancelled = client.responses.cancel(long.id)
    assert cancelled.status == "cancelled"
    assert client.responses.retrieve(long.id).status == "cancelled"
    # Its generation was aborted: the server answers at once, its KV freed.
    started = time.monotonic()
    client.responses.create(model="default", input=QUESTION, temperature=0, max_output_tokens=4)
    assert time.monotonic() - started < 15


def test_store_operations_and_refusals(client: openai.OpenAI) -> None:
    kept = client.responses.create(model="default", input=QUESTION, temperature=0, max_output_tokens=4)
    client.responses.delete(kept.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(kept.id)
    unstored = client.responses.create(model="default", input=QUESTION, max_output_tokens=4, store=False)
    with pytest.raises(openai.NotFoundError) as missing:
        client.responses.create(model="default", input="Go on.", previous_response_id=unstored.id)
    assert missing.value.body["param"] == "previous_response_id"
    with pytest.raises(openai.BadRequestError) as hosted:
        client.responses.create(model="default", input=QUESTION, tools=[{"type": "web_search"}])
    assert hosted.value.body["param"] == "tools.0.type"
    with pytest.raises(openai.BadRequestError):
        client.responses.cancel(client.responses.create(model="default", input=QUESTION, max_output_tokens=2).id)
