"""Bad input gets a 400 (or 404 for an unknown model) with an OpenAI-style error object that
names the problem: never a 500, never a hang (every call has a client timeout)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from sglang.ci.servers import REQUEST_TIMEOUT_S, RunningServer
from sglang.ci.suites.e2e.openai_errors import assert_openai_error

MESSAGES = [{"role": "user", "content": "Hi"}]
CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
GENERATE = "/generate"
TOKENIZE = "/v1/tokenize"
DETOKENIZE = "/v1/detokenize"
BODY_ROUTES = [GENERATE, COMPLETIONS, CHAT, TOKENIZE, DETOKENIZE]
"""Every route that reads a JSON body (the malformed-body cases apply to all of them)."""
TOO_LONG_IDS = [42] * 9000
"""More tokens than the model's context (8192)."""


def post(http: httpx.Client, path: str, body: Any) -> httpx.Response:
    if isinstance(body, (bytes, str)):
        return http.post(path, content=body, headers={"content-type": "application/json"})
    return http.post(path, json=body)


@pytest.mark.parametrize("path", BODY_ROUTES)
@pytest.mark.parametrize("body", ["{not json", '{"prompt": "x",}', "", "\xff\xfe"])
def test_malformed_json(http: httpx.Client, path: str, body: str) -> None:
    assert_openai_error(post(http, path, body.encode("latin-1")), 400)


@pytest.mark.parametrize("path", BODY_ROUTES)
@pytest.mark.parametrize(
    "body",
    [
        b'{"text": "\xff\xfe", "prompt": "\xc3\x28", "messages": [{"role": "user", "content": "\xed\xa0\x80"}]}',
        b'{"text": "a", "sampling_params": {"stop": "\x80"}}',
        b'{"prompt": "\\ud800"}',  # a lone surrogate, escaped: valid JSON, no valid text
    ],
)
def test_invalid_utf8_in_strings(http: httpx.Client, path: str, body: bytes) -> None:
    response = post(http, path, body)
    assert 400 <= response.status_code < 500, response.text
    assert_openai_error(response, response.status_code)


@pytest.mark.parametrize("path", BODY_ROUTES)
@pytest.mark.parametrize("depth", [64, 100_000])
def test_deep_nesting(http: httpx.Client, path: str, depth: int) -> None:
    nested = "[" * depth + "]" * depth
    body = f'{{"text": {nested}, "prompt": {nested}, "messages": {nested}, "tokens": {nested}}}'
    assert_openai_error(post(http, path, body), 400)


@pytest.mark.parametrize("path", BODY_ROUTES)
@pytest.mark.parametrize("body", [[], "a string", 3, None])
def test_body_not_an_object(http: httpx.Client, path: str, body: Any) -> None:
    assert_openai_error(post(http, path, json.dumps(body)), 400)


# (path, body, param the error must name)
UNKNOWN_FIELDS = [
    (CHAT, {"messages": MESSAGES, "max_completion_tokens": 1, "temprature": 0.5}, "temprature"),
    (CHAT, {"messages": [{"role": "user", "content": "Hi", "colour": "red"}], "max_tokens": 1}, "colour"),
    (COMPLETIONS, {"prompt": "Hi", "max_tokens": 1, "best_of_all": 2}, "best_of_all"),
    (GENERATE, {"text": "Hi", "sampling_params": {"max_new_tokens": 1, "temprature": 0}}, "temprature"),
    (GENERATE, {"text": "Hi", "max_new_tokens": 1}, "max_new_tokens"),
]


@pytest.mark.parametrize(("path", "body", "param"), UNKNOWN_FIELDS)
def test_unknown_fields(http: httpx.Client, path: str, body: dict[str, Any], param: str) -> None:
    assert_openai_error(post(http, path, body), 400, param)


WRONG_TYPES = [
    (CHAT, {"messages": "Hi"}, "messages"),
    (CHAT, {"messages": [{"role": "user", "content": 5}]}, "content"),
    (CHAT, {"messages": [{"role": "wizard", "content": "Hi"}]}, "role"),
    (CHAT, {"messages": MESSAGES, "temperature": "hot"}, "temperature"),
    (CHAT, {"messages": MESSAGES, "max_completion_tokens": "ten"}, "max_completion_tokens"),
    (CHAT, {"messages": MESSAGES, "stop": 7}, "stop"),
    (CHAT, {"messages": MESSAGES, "tools": {"type": "function"}}, "tools"),
    (COMPLETIONS, {"prompt": 5}, "prompt"),
    (COMPLETIONS, {"prompt": [1.5, 2]}, "prompt"),
    (COMPLETIONS, {"prompt": "Hi", "n": "two"}, "n"),
    (COMPLETIONS, {"prompt": "Hi", "stream": "yes please"}, "stream"),
    (GENERATE, {"text": 5}, "text"),
    (GENERATE, {"input_ids": ["a", "b"]}, "input_ids"),
    (GENERATE, {"text": "Hi", "sampling_params": {"temperature": "hot"}}, "temperature"),
    (GENERATE, {"text": "Hi", "sampling_params": "greedy"}, None),
    (GENERATE, {"text": "Hi", "logprob_start_len": "first"}, None),
]


@pytest.mark.parametrize(("path", "body", "param"), WRONG_TYPES)
def test_wrong_types(http: httpx.Client, path: str, body: dict[str, Any], param: str | None) -> None:
    assert_openai_error(post(http, path, body), 400, param)


OUT_OF_RANGE = [
    (CHAT, {"temperature": -1}, "temperature"),
    (CHAT, {"top_p": 1.5}, "top_p"),
    (CHAT, {"top_p": 0}, "top_p"),
    (CHAT, {"n": 0}, "n"),
    (CHAT, {"max_completion_tokens": 0}, "max_completion_tokens"),
    (CHAT, {"max_tokens": -5}, "max_tokens"),
    (CHAT, {"frequency_penalty": 3}, "frequency_penalty"),
    (CHAT, {"presence_penalty": -2.5}, "presence_penalty"),
    (CHAT, {"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    (CHAT, {"top_logprobs": 2}, "top_logprobs"),  # without logprobs
    (CHAT, {"logit_bias": {"999999": 1}}, "logit_bias"),
    (CHAT, {"top_k": 0}, "top_k"),
    (COMPLETIONS, {"logprobs": 21}, "logprobs"),
    (COMPLETIONS, {"max_tokens": -1}, "max_tokens"),
    (COMPLETIONS, {"temperature": -0.5}, "temperature"),
    # `echo` detokenizes the prompt before generation; an id past int64 once overflowed there (500).
    (COMPLETIONS, {"prompt": [2**70, 5], "echo": True}, "prompt"),
    # A seed past 64 bits once killed the engine (the generator's seeding raised in the scheduler).
    (CHAT, {"seed": 2**70}, "seed"),
    (GENERATE, {"sampling_params": {"seed": 2**64}}, "seed"),
    (GENERATE, {"sampling_params": {"sampling_seed": -(2**64)}}, "sampling_seed"),
    (GENERATE, {"sampling_params": {"max_new_tokens": -1}}, "max_new_tokens"),
    (GENERATE, {"sampling_params": {"top_p": 2}}, "top_p"),
    (GENERATE, {"sampling_params": {"min_p": 1.5}}, "min_p"),
    (GENERATE, {"sampling_params": {"repetition_penalty": 0}}, "repetition_penalty"),
    (GENERATE, {"sampling_params": {"stop_token_ids": [10**9]}}, "stop_token_ids"),
    (GENERATE, {"return_logprob": True, "top_logprobs_num": -1}, "top_logprobs_num"),
    (GENERATE, {"return_logprob": True, "logprob_start_len": 99}, "logprob_start_len"),
]


@pytest.mark.parametrize(("path", "fields", "param"), OUT_OF_RANGE)
def test_out_of_range_sampling_values(http: httpx.Client, path: str, fields: dict[str, Any], param: str) -> None:
    base = {CHAT: {"messages": MESSAGES}, COMPLETIONS: {"prompt": "Hi"}, GENERATE: {"text": "Hi"}}[path]
    assert_openai_error(post(http, path, {**base, **fields}), 400, param)


EMPTY_PROMPTS = [
    (CHAT, {"messages": []}, "messages"),
    (COMPLETIONS, {"prompt": ""}, "prompt"),
    (COMPLETIONS, {"prompt": []}, "prompt"),
    (GENERATE, {"text": ""}, "text"),
    (GENERATE, {"input_ids": []}, "input_ids"),
    (GENERATE, {"text": []}, "text"),
]


@pytest.mark.parametrize(("path", "body", "param"), EMPTY_PROMPTS)
def test_empty_prompt(http: httpx.Client, path: str, body: dict[str, Any], param: str) -> None:
    assert_openai_error(post(http, path, body), 400, param)


def test_prompt_longer_than_the_context(http: httpx.Client) -> None:
    long_text = "word " * 9000
    cases = [
        (GENERATE, {"input_ids": TOO_LONG_IDS}),
        (GENERATE, {"text": long_text}),
        (COMPLETIONS, {"prompt": TOO_LONG_IDS, "max_tokens": 1}),
        (CHAT, {"messages": [{"role": "user", "content": long_text}], "max_tokens": 1}),
    ]
    for path, body in cases:
        error = assert_openai_error(post(http, path, body), 400)
        assert "context" in error["message"] or "8192" in error["message"], error


def test_input_ids_outside_the_vocabulary(http: httpx.Client) -> None:
    assert_openai_error(post(http, GENERATE, {"input_ids": [1, 10**7]}), 400, "input_ids")
    assert_openai_error(post(http, COMPLETIONS, {"prompt": [1, -3]}), 400, "prompt")


NONSENSE_SCHEMA_FORMAT = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}}
BAD_GRAMMARS = [
    (GENERATE, {"text": "Hi", "sampling_params": {"regex": "(unclosed"}}, "regex"),
    (GENERATE, {"text": "Hi", "sampling_params": {"json_schema": '{"type": "nonsense"}'}}, "json_schema"),
    (GENERATE, {"text": "Hi", "sampling_params": {"json_schema": "{not json"}}, "json_schema"),
    (GENERATE, {"text": "Hi", "sampling_params": {"ebnf": 'root ::= "a" |'}}, "ebnf"),
    (COMPLETIONS, {"prompt": "Hi", "regex": "[a-"}, "regex"),
    (CHAT, {"messages": MESSAGES, "response_format": NONSENSE_SCHEMA_FORMAT}, "json_schema"),
    (CHAT, {"messages": MESSAGES, "response_format": {"type": "json_schema"}}, "json_schema"),
    (CHAT, {"messages": MESSAGES, "response_format": {"type": "xml"}}, "response_format"),
]


@pytest.mark.parametrize(("path", "body", "param"), BAD_GRAMMARS)
def test_invalid_schema_or_regex(http: httpx.Client, path: str, body: dict[str, Any], param: str) -> None:
    assert_openai_error(post(http, path, body), 400, param)


def test_bad_tool_choice(http: httpx.Client) -> None:
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    named = {"type": "function", "function": {"name": "g"}}
    body = {"messages": MESSAGES, "tools": [tool], "tool_choice": named}
    assert_openai_error(post(http, CHAT, body), 400, "tool_choice")
    assert_openai_error(post(http, CHAT, {"messages": MESSAGES, "tool_choice": "required"}), 400, "tool_choice")


@pytest.mark.parametrize("path", [COMPLETIONS, CHAT])
def test_unknown_model_is_404(http: httpx.Client, path: str) -> None:
    body = {"model": "gpt-17-ultra", "max_tokens": 1, **({"prompt": "Hi"} if path == COMPLETIONS else {})}
    if path == CHAT:
        body["messages"] = MESSAGES
    error = assert_openai_error(post(http, path, body), 404, "model")
    assert "gpt-17-ultra" in error["message"]


def test_openai_client_raises_typed_errors(server: RunningServer) -> None:
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", timeout=REQUEST_TIMEOUT_S, max_retries=0)
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="no-such-model", messages=MESSAGES, max_tokens=1)
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model="", prompt="Hi", max_tokens=1, temperature=-3)
    assert caught.value.status_code == 400 and "temperature" in str(caught.value)


def test_unknown_route_and_method(http: httpx.Client) -> None:
    assert http.post("/v1/no_such_route", json={}).status_code == 404
    assert http.get(GENERATE).status_code == 405
