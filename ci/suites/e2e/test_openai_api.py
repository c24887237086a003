"""The OpenAI API through the official `openai` client against a real server: /v1/models,
/v1/completions and /v1/chat/completions, non-streaming and streaming, with the sampling,
logprob, structured-output and tool features the OpenAI spec defines."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import openai
import pytest

from sglang.ci.servers import REQUEST_TIMEOUT_S, RunningServer
from sglang.ci.suites.e2e.openai_errors import assert_openai_error

QUESTION = "What is the capital of France?"
PROMPT = "The capital of France is"
NO_EOS = {"ignore_eos": True}
"""SGLang's extra: generate exactly max_tokens, so token counts are exact."""


@pytest.fixture(scope="module")
def client(server: RunningServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", timeout=REQUEST_TIMEOUT_S, max_retries=0) as c:
        yield c


@pytest.fixture(scope="module")
def model(client: openai.OpenAI) -> str:
    return client.models.list().data[0].id


def user(content: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": content}]


# -- /v1/models --------------------------------------------------------------------------------


@pytest.mark.e2e_core
def test_models_lists_the_served_model(client: openai.OpenAI, model_info: dict[str, Any]) -> None:
    models = client.models.list().data
    assert len(models) == 1
    assert models[0].object == "model"
    assert models[0].id in (model_info["model_path"], model_info.get("served_model_name"))


# -- /v1/completions ---------------------------------------------------------------------------


@pytest.mark.e2e_core
def test_completion(client: openai.OpenAI, model: str, tokenizer: Any) -> None:
    out = client.completions.create(model=model, prompt=PROMPT, max_tokens=5, temperature=0, extra_body=NO_EOS)
    assert out.object == "text_completion" and out.id and out.model == model
    assert len(out.choices) == 1
    choice = out.choices[0]
    assert choice.index == 0 and choice.finish_reason == "length"
    assert choice.text and len(tokenizer.encode(choice.text)) in range(4, 7)  # re-tokenizing may merge or split
    assert out.usage.prompt_tokens == len(tokenizer.encode(PROMPT))
    assert out.usage.completion_tokens == 5
    assert out.usage.total_tokens == out.usage.prompt_tokens + 5


@pytest.mark.e2e_core
def test_completion_stream_with_usage(client: openai.OpenAI, model: str) -> None:
    kwargs = {"model": model, "prompt": PROMPT, "max_tokens": 5, "temperature": 0, "extra_body": NO_EOS}
    whole = client.completions.create(**kwargs).choices[0].text
    chunks = list(client.completions.create(**kwargs, stream=True, stream_options={"include_usage": True}))
    assert all(c.object == "text_completion" for c in chunks)
    text_chunks = [c for c in chunks if c.choices]
    assert "".join(c.choices[0].text for c in text_chunks) == whole
    assert [c.choices[0].finish_reason for c in text_chunks][-1] == "length"
    assert all(c.choices[0].finish_reason is None for c in text_chunks[:-1])
    assert len({c.id for c in chunks}) == 1
    # include_usage: one last chunk with no choices carries the usage; the others carry none.
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 5
    assert all(c.usage is None for c in chunks[:-1])


def test_completion_stream_without_usage(client: openai.OpenAI, model: str) -> None:
    chunks = list(client.completions.create(model=model, prompt=PROMPT, max_tokens=2, stream=True))
    assert chunks and all(c.usage is None and c.choices for c in chunks)


def test_completion_n(client: openai.OpenAI, model: str, tokenizer: Any) -> None:
    out = client.completions.create(
        model=model, prompt=PROMPT, max_tokens=3, n=3, temperature=1.0, seed=7, extra_body=NO_EOS
    )
    assert sorted(c.index for c in out.choices) == [0, 1, 2]
    assert all(c.finish_reason == "length" for c in out.choices)
    assert out.usage.completion_tokens == 9
    assert out.usage.prompt_tokens == len(tokenizer.encode(PROMPT))  # the prompt counts once, as in OpenAI


def test_completion_logprobs(client: openai.OpenAI, model: str) -> None:
    out = client.completions.create(
        model=model, prompt=PROMPT, max_tokens=3, temperature=0, logprobs=2, extra_body=NO_EOS
    )
    choice = out.choices[0]
    lp = choice.logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 3
    assert "".join(lp.tokens) == choice.text
    assert lp.text_offset == sorted(lp.text_offset)
    for token, logprob, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert logprob <= 0
        assert 1 <= len(top) <= 2
        # Greedy: the chosen token is the most likely one.
        assert max(top.values()) == pytest.approx(logprob, abs=1e-4)
        assert top.get(token) == pytest.approx(logprob, abs=1e-4)


def test_completion_echo(client: openai.OpenAI, model: str) -> None:
    plain = client.completions.create(model=model, prompt=PROMPT, max_tokens=3, temperature=0, extra_body=NO_EOS)
    echoed = client.completions.create(
        model=model, prompt=PROMPT, max_tokens=3, temperature=0, echo=True, extra_body=NO_EOS
    )
    assert echoed.choices[0].text == PROMPT + plain.choices[0].text


def test_completion_prompt_as_token_ids(client: openai.OpenAI, model: str, tokenizer: Any) -> None:
    ids = tokenizer.encode(PROMPT)
    by_text = client.completions.create(model=model, prompt=PROMPT, max_tokens=4, temperature=0, extra_body=NO_EOS)
    by_ids = client.completions.create(model=model, prompt=ids, max_tokens=4, temperature=0, extra_body=NO_EOS)
    assert by_ids.choices[0].text == by_text.choices[0].text
    assert by_ids.usage.prompt_tokens == len(ids)
    batch = client.completions.create(model=model, prompt=[ids, ids[:2]], max_tokens=1, extra_body=NO_EOS)
    assert sorted(c.index for c in batch.choices) == [0, 1]


def test_completion_prompt_list(client: openai.OpenAI, model: str) -> None:
    out = client.completions.create(
        model=model, prompt=[PROMPT, "Water boils at"], max_tokens=2, temperature=0, extra_body=NO_EOS
    )
    assert sorted(c.index for c in out.choices) == [0, 1]
    alone = client.completions.create(
        model=model, prompt="Water boils at", max_tokens=2, temperature=0, extra_body=NO_EOS
    )
    assert next(c for c in out.choices if c.index == 1).text == alone.choices[0].text


def test_completion_stop(client: openai.OpenAI, model: str) -> None:
    free = client.completions.create(model=model, prompt=PROMPT, max_tokens=8, temperature=0, extra_body=NO_EOS)
    text = free.choices[0].text
    stop = text.strip().split()[0][:2]
    out = client.completions.create(
        model=model, prompt=PROMPT, max_tokens=8, temperature=0, stop=[stop, "never-seen-stop"], extra_body=NO_EOS
    )
    assert out.choices[0].finish_reason == "stop"
    assert text.startswith(out.choices[0].text) and stop not in out.choices[0].text


def test_completion_seed_reproducible(client: openai.OpenAI, model: str) -> None:
    def sample(seed: int) -> str:
        return (
            client.completions.create(
                model=model, prompt="Once upon a time", max_tokens=6, temperature=1.0, seed=seed, extra_body=NO_EOS
            )
            .choices[0]
            .text
        )

    first = sample(1234)
    assert sample(1234) == first
    assert len({first, sample(1), sample(2), sample(3)}) > 1, "sampling with different seeds never differs"


@pytest.mark.e2e_core
def test_bad_requests_are_openai_400s(client: openai.OpenAI, model: str, model_info: dict[str, Any]) -> None:
    """Out-of-range values, a prompt past the context, a max_tokens that would pass it and an
    embedding of a generative model are refused before any step runs."""
    too_long = [42] * (model_info["context_length"] + 1)
    whole = model_info["context_length"]  # with the prompt, past the context
    calls = [  # (what the error names, the call)
        ("temperature", lambda: client.chat.completions.create(model=model, messages=user(QUESTION), temperature=-1)),
        ("max_tokens", lambda: client.completions.create(model=model, prompt=PROMPT, max_tokens=-1)),
        ("context", lambda: client.completions.create(model=model, prompt=too_long, max_tokens=1)),
        ("max_tokens", lambda: client.chat.completions.create(model=model, messages=user(QUESTION), max_tokens=whole)),
        ("embedding", lambda: client.embeddings.create(model=model, input=QUESTION)),
    ]
    for named, call in calls:
        with pytest.raises(openai.BadRequestError) as refused:
            call()
        assert_openai_error(refused.value.response, 400, named)


# -- /v1/chat/completions ----------------------------------------------------------------------


@pytest.mark.e2e_core
def test_chat(client: openai.OpenAI, model: str) -> None:
    out = client.chat.completions.create(model=model, messages=user(QUESTION), max_completion_tokens=12, temperature=0)
    assert out.object == "chat.completion" and out.model == model
    message = out.choices[0].message
    assert message.role == "assistant"
    assert "Paris" in message.content
    assert out.choices[0].finish_reason in ("stop", "length")
    assert 0 < out.usage.completion_tokens <= 12
    assert out.usage.prompt_tokens > 20  # the chat template (system prompt) is applied


def test_chat_max_completion_tokens(client: openai.OpenAI, model: str) -> None:
    out = client.chat.completions.create(
        model=model, messages=user("Tell me a long story."), max_completion_tokens=4, extra_body=NO_EOS
    )
    assert out.usage.completion_tokens == 4 and out.choices[0].finish_reason == "length"
    legacy = client.chat.completions.create(
        model=model, messages=user("Tell me a long story."), max_tokens=3, extra_body=NO_EOS
    )
    assert legacy.usage.completion_tokens == 3


@pytest.mark.e2e_core
def test_chat_stream_with_usage(client: openai.OpenAI, model: str) -> None:
    kwargs = {"model": model, "messages": user(QUESTION), "max_completion_tokens": 6, "temperature": 0}
    whole = client.chat.completions.create(**kwargs)
    chunks = list(client.chat.completions.create(**kwargs, stream=True, stream_options={"include_usage": True}))
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    with_choices = [c for c in chunks if c.choices]
    assert with_choices[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in with_choices) == whole.choices[0].message.content
    assert with_choices[-1].choices[0].finish_reason == whole.choices[0].finish_reason
    assert chunks[-1].choices == []
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens


def test_chat_n(client: openai.OpenAI, model: str) -> None:
    out = client.chat.completions.create(
        model=model,
        messages=user("Say a word."),
        max_completion_tokens=3,
        n=2,
        temperature=1.0,
        seed=3,
        extra_body=NO_EOS,
    )
    assert sorted(c.index for c in out.choices) == [0, 1]
    assert out.usage.completion_tokens == 6


def test_chat_stream_n(client: openai.OpenAI, model: str) -> None:
    chunks = list(
        client.chat.completions.create(
            model=model, messages=user("Say a word."), max_completion_tokens=2, n=2, stream=True, extra_body=NO_EOS
        )
    )
    finished = {c.choices[0].index for c in chunks if c.choices and c.choices[0].finish_reason}
    assert finished == {0, 1}


def test_chat_logprobs(client: openai.OpenAI, model: str) -> None:
    out = client.chat.completions.create(
        model=model,
        messages=user(QUESTION),
        max_completion_tokens=3,
        temperature=0,
        logprobs=True,
        top_logprobs=3,
        extra_body=NO_EOS,
    )
    content = out.choices[0].logprobs.content
    assert len(content) == 3
    assert "".join(t.token for t in content) == out.choices[0].message.content
    for item in content:
        assert item.logprob <= 0 and len(item.top_logprobs) == 3
        assert item.top_logprobs[0].token == item.token
        assert item.top_logprobs[0].logprob == pytest.approx(item.logprob, abs=1e-4)
        assert [t.logprob for t in item.top_logprobs] == sorted((t.logprob for t in item.top_logprobs), reverse=True)
        assert item.bytes == list(item.token.encode())


def test_chat_stop(client: openai.OpenAI, model: str) -> None:
    free = client.chat.completions.create(
        model=model, messages=user(QUESTION), max_completion_tokens=10, temperature=0
    ).choices[0]
    words = free.message.content.split()
    assert len(words) >= 3, free
    out = client.chat.completions.create(
        model=model, messages=user(QUESTION), max_completion_tokens=10, temperature=0, stop=[" " + words[2]]
    ).choices[0]
    assert out.finish_reason == "stop"
    assert free.message.content.startswith(out.message.content)
    assert words[2] not in out.message.content.split()


def test_chat_seed_reproducible(client: openai.OpenAI, model: str) -> None:
    def sample(seed: int) -> str:
        return (
            client.chat.completions.create(
                model=model,
                messages=user("Name an animal."),
                max_completion_tokens=5,
                temperature=1.0,
                seed=seed,
                extra_body=NO_EOS,
            )
            .choices[0]
            .message.content
        )

    first = sample(99)
    assert sample(99) == first


# -- structured output -------------------------------------------------------------------------

PERSON_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}


def test_chat_response_format_json_object(client: openai.OpenAI, model: str) -> None:
    # One example turn keeps this small model from nesting objects until max tokens.
    messages = [
        *user("The capital of Italy, as JSON."),
        {"role": "assistant", "content": '{"capital": "Rome"}'},
        *user("The capital of France, as JSON."),
    ]
    out = client.chat.completions.create(
        model=model,
        messages=messages,
        response_format={"type": "json_object"},
        max_completion_tokens=40,
        temperature=0,
    )
    assert out.choices[0].finish_reason == "stop", out.choices[0].message.content
    assert isinstance(json.loads(out.choices[0].message.content), dict)


def test_chat_response_format_json_schema(client: openai.OpenAI, model: str) -> None:
    out = client.chat.completions.create(
        model=model,
        messages=user("Describe a person called Ann, aged 31, as JSON."),
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON_SCHEMA}},
        max_completion_tokens=40,
        temperature=0,
    )
    assert out.choices[0].finish_reason == "stop", out.choices[0].message.content
    jsonschema.validate(json.loads(out.choices[0].message.content), PERSON_SCHEMA)


def test_completion_json_schema_extra(client: openai.OpenAI, model: str) -> None:
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    out = client.completions.create(
        model=model,
        prompt="Answer in JSON: is the sky blue?",
        max_tokens=30,
        temperature=0,
        extra_body={"json_schema": json.dumps(schema)},
    )
    jsonschema.validate(json.loads(out.choices[0].text), schema)


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 20}},
            "required": ["city"],
        },
    },
}
TIME_TOOL = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The current time in a timezone.",
        "parameters": {"type": "object", "properties": {"tz": {"type": "string", "maxLength": 20}}, "required": ["tz"]},
    },
}


def assert_tool_call(out: Any, name: str | None) -> Any:
    """The first tool call of `out`: a known function (`name` if given) with arguments that
    parse and validate against its parameters."""
    message = out.choices[0].message
    assert message.tool_calls, message
    call = message.tool_calls[0]
    assert call.type == "function" and call.id
    tools = {t["function"]["name"]: t for t in (WEATHER_TOOL, TIME_TOOL)}
    assert call.function.name in tools and (name is None or call.function.name == name)
    jsonschema.validate(json.loads(call.function.arguments), tools[call.function.name]["function"]["parameters"])
    return call


def test_chat_tool_choice_required(client: openai.OpenAI, model: str) -> None:
    out = client.chat.completions.create(
        model=model,
        messages=user("What is the weather in Paris?"),
        tools=[WEATHER_TOOL, TIME_TOOL],
        tool_choice="required",
        max_completion_tokens=60,
        temperature=0,
    )
    assert_tool_call(out, None)
    assert out.choices[0].finish_reason in ("tool_calls", "stop")


def test_chat_tool_choice_named(client: openai.OpenAI, model: str) -> None:
    out = client.chat.completions.create(
        model=model,
        messages=user("What is the weather in Paris?"),
        tools=[WEATHER_TOOL, TIME_TOOL],
        tool_choice={"type": "function", "function": {"name": "get_time"}},
        max_completion_tokens=60,
        temperature=0,
    )
    assert_tool_call(out, "get_time")


def test_chat_tool_call_streamed(client: openai.OpenAI, model: str) -> None:
    stream = client.chat.completions.create(
        model=model,
        messages=user("What is the weather in Rome?"),
        tools=[WEATHER_TOOL],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_completion_tokens=60,
        temperature=0,
        stream=True,
    )
    chunks = list(stream)
    calls: dict[int, dict[str, str]] = {}
    for chunk in chunks:
        for delta_call in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            entry = calls.setdefault(delta_call.index, {"name": "", "arguments": ""})
            entry["name"] += delta_call.function.name or ""
            entry["arguments"] += delta_call.function.arguments or ""
    assert calls and calls[0]["name"] == "get_weather"
    jsonschema.validate(json.loads(calls[0]["arguments"]), WEATHER_TOOL["function"]["parameters"])
