"""The OpenAI API without an engine: request parsing and conversion to `GenerateInput`, chat
template rendering with the embedded model's tokenizer, tool-call prompts, grammars and parsing,
response and stream-chunk building (checked against the `openai` package's own types), and the
routes end to end through the official client over a scripted tokenizer manager.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import pytest
import xgrammar as xgr
from fastapi import FastAPI
from openai.types import Completion
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from pydantic import ValidationError

from sglang.runtime.parsers import ParsedOutput, ToolCallStream, parse_tool_calls
from sglang.runtime.parsers.tool_formats import DEFAULT_FORMAT, FORCED_FORMAT
from sglang.runtime.parsers.tool_stream import merge_calls
from sglang.runtime.processes.merged_streams import merged
from sglang.runtime.processes.messages import ReadyInfo
from sglang.runtime.requests.generate_input import GenerateInput, InvalidRequestError
from sglang.runtime.requests.sampling_params import SamplingParams, SamplingParamsError
from sglang.runtime.server.errors import ApiError, error_response
from sglang.runtime.server.openai import openai_router
from sglang.runtime.server.openai.chat import ChatChunker, chat_plan, chat_response
from sglang.runtime.server.openai.chat_template import (
    NAMED_TEMPLATES,
    ChatTemplateError,
    prompt_ids,
    render_chat,
    resolve_chat_template,
    supports_tools,
)
from sglang.runtime.server.openai.completions import CompletionChunker, completion_plan, completion_response
from sglang.runtime.server.openai.logprobs import MIN_LOGPROB, completion_logprobs, token_text
from sglang.runtime.server.openai.messages import template_messages
from sglang.runtime.server.openai.protocol import ChatCompletionRequest, ChatMessage, CompletionRequest
from sglang.runtime.server.openai.responses import ResponseHeader, finish_reason, openai_error, usage
from sglang.runtime.server.openai.sampling import Constraint, native_names, pick_grammar
from sglang.runtime.server.openai.streaming import SSE_DONE, open_stream, per_choice_inputs
from sglang.runtime.server.openai.tool_calls import forced_call_schema
from sglang.runtime.server.state import ServerState
from sglang.runtime.server_args import ServerArgs

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
NAMES = frozenset({"get_weather", "get_time"})
NATIVE_TOOLS_TEMPLATE = (
    "{% if tools %}TOOLS:{{ tools | tojson }}\n{% endif %}"
    "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% if m.tool_calls %}{{ m.tool_calls | tojson }}{% endif %}\n"
    "{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}"
)


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    from sglang.runtime.loader import EmbeddedModelMissingError, open_model_source

    try:
        return open_model_source(None).load_tokenizer()
    except EmbeddedModelMissingError as e:
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def smol_template(tokenizer: Any) -> str:
    return tokenizer.chat_template


def chat(**body: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({"messages": [{"role": "user", "content": "Hi"}], **body})


def output(text: str, finish: dict | None = None, tokens: int = 3, **meta: Any) -> dict[str, Any]:
    """A manager output dict; `finish=None` means still running."""
    meta = {"prompt_tokens": 5, "completion_tokens": tokens, "cached_tokens": 2, "finish_reason": finish, **meta}
    return {"text": text, "output_ids": list(range(tokens)), "meta_info": meta}


STOP = {"type": "stop", "matched": 2}
HEADER = ResponseHeader("id-1", "smol", 1700000000)


# -- request models ------------------------------------------------------------------------------
def test_requests_reject_unknown_fields_but_accept_sglang_extras() -> None:
    with pytest.raises(ValidationError):
        CompletionRequest.model_validate({"prompt": "a", "bogus": 1})
    with pytest.raises(ValidationError):
        chat(frobnicate=True)
    extras = {"top_k": 5, "min_p": 0.1, "regex": "a+", "repetition_penalty": 1.1, "min_tokens": 2}
    extras |= {"stop_token_ids": [3], "ignore_eos": True, "skip_special_tokens": False, "separate_reasoning": False}
    request = chat(**extras, user="u", metadata={"k": "v"})
    assert request.top_k == 5 and request.regex == "a+"


@pytest.mark.parametrize("prompt", ["a", ["a", "b"], [1, 2], [[1], [2, 3]]])
def test_completion_prompt_forms(prompt: Any) -> None:
    assert CompletionRequest.model_validate({"prompt": prompt}).prompt == prompt


def test_completion_prompt_rejects_non_prompts() -> None:
    for bad in ([True], 3, [1.5], None):
        with pytest.raises(ValidationError):
            CompletionRequest.model_validate({"prompt": bad})


def test_message_content_rules() -> None:
    with pytest.raises(ValidationError):
        ChatMessage.model_validate({"role": "user"})
    with pytest.raises(ValidationError):
        ChatMessage.model_validate({"role": "user", "content": "x", "tool_calls": [_call()]})
    assert ChatMessage.model_validate({"role": "assistant", "tool_calls": [_call()]}).text() == ""
    parts = ChatMessage.model_validate({"role": "user", "content": [{"type": "text", "text": "a"}] * 2})
    assert parts.text() == "a\na"
    with pytest.raises(ValidationError):
        ChatMessage.model_validate({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]})


def _call(name: str = "get_weather", arguments: str = '{"city": "Paris"}') -> dict[str, Any]:
    return {"id": "call_1", "type": "function", "function": {"name": name, "arguments": arguments}}


# -- request -> GenerateInput --------------------------------------------------------------------
def _validated(obj: GenerateInput) -> list[SamplingParams]:
    """What the runtime itself makes of `obj` (the manager's own parsing and validation)."""
    items = obj.split()
    for item in items:
        item.params.validate(49152)
    return [item.params for item in items]


def test_completion_plan_defaults_and_mapping() -> None:
    request = CompletionRequest.model_validate(
        {"prompt": ["a", "b"], "n": 2, "temperature": 0.5, "stop": "x", "seed": 7, "top_k": 3, "min_tokens": 1}
    )
    plan = completion_plan(request, lambda ids: "?")
    params = plan.input.sampling_params
    assert params["max_new_tokens"] == 16 and params["min_new_tokens"] == 1 and params["n"] == 2
    assert "top_p" not in params and "frequency_penalty" not in params  # unset: SGLang's defaults
    assert plan.input.text == ["a", "b"] and plan.input.input_ids is None and not plan.input.return_logprob
    parsed = _validated(plan.input)
    assert len(parsed) == 2 and parsed[0].temperature == 0.5 and parsed[0].top_k == 3 and parsed[0].seed == 7


def test_completion_plan_token_prompts_echo_and_logprobs() -> None:
    request = CompletionRequest.model_validate({"prompt": [[1, 2], [3]], "echo": True, "logprobs": 2, "max_tokens": 0})
    plan = completion_plan(request, lambda ids: "-".join(map(str, ids)))
    assert plan.input.input_ids == [[1, 2], [3]] and plan.input.is_batch
    assert plan.input.return_logprob and plan.input.logprob_start_len == 0 and plan.input.top_logprobs_num == 2
    assert plan.echo_texts == ["1-2", "3"] and plan.echo_text(1) == "3"
    no_echo = completion_plan(CompletionRequest.model_validate({"prompt": "a", "logprobs": 0}), str)
    assert no_echo.input.logprob_start_len == -1 and no_echo.input.return_logprob


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"best_of": 3}, "best_of"),
        ({"suffix": "x"}, "suffix"),
        ({"prompt": []}, "prompt"),
        ({"stream_options": {"include_usage": True}}, "stream_options"),
        ({"json_schema": "{}", "regex": "a"}, "regex"),
    ],
)
def test_completion_plan_refusals(body: dict, param: str) -> None:
    with pytest.raises(ApiError) as e:
        completion_plan(CompletionRequest.model_validate({"prompt": "a", **body}), str)
    assert e.value.status == 400 and e.value.param == param


def test_pick_grammar() -> None:
    assert pick_grammar({"a": None, "b": ("regex", "x")}) == Constraint("b", "regex", "x")
    assert pick_grammar({"a": None}) is None
    with pytest.raises(ApiError) as e:
        pick_grammar({"response_format": ("json_schema", "{}"), "ebnf": ("ebnf", "x")})
    assert e.value.param == "ebnf"


def test_chat_plan_renders_with_the_model_template(tokenizer: Any, smol_template: str) -> None:
    request = chat(max_completion_tokens=5, max_tokens=9, logprobs=True, top_logprobs=3, stop=["\n"])
    plan = chat_plan(request, tokenizer, smol_template)
    expected = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True
    )
    assert tokenizer.decode(plan.input.input_ids) == expected
    assert plan.input.sampling_params["max_new_tokens"] == 5  # max_completion_tokens wins
    assert plan.input.return_logprob and plan.input.top_logprobs_num == 3 and plan.tools is None
    assert chat_plan(chat(), tokenizer, smol_template).input.sampling_params["max_new_tokens"] is None
    _validated(plan.input)


def test_chat_plan_response_format(tokenizer: Any, smol_template: str) -> None:
    params = chat_plan(chat(response_format={"type": "json_object"}), tokenizer, smol_template).input.sampling_params
    assert json.loads(params["json_schema"]) == {"type": "object"}
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": True}}
    params = chat_plan(chat(response_format=fmt), tokenizer, smol_template).input.sampling_params
    assert json.loads(params["json_schema"]) == schema
    text = chat_plan(chat(response_format={"type": "text"}), tokenizer, smol_template)
    assert "json_schema" not in text.input.sampling_params
    with pytest.raises(ApiError) as e:
        chat_plan(chat(response_format={"type": "json_object"}, regex="a"), tokenizer, smol_template)
    assert e.value.param == "regex"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
        ({"tools": [WEATHER], "tool_choice": "required", "response_format": {"type": "json_object"}}, "tool_choice"),
        ({"messages": [{"role": "user", "content": "x"}], "continue_final_message": True}, "messages"),
    ],
)
def test_chat_plan_refusals(tokenizer: Any, smol_template: str, body: dict, param: str) -> None:
    with pytest.raises(ApiError) as e:
        chat_plan(chat(**body), tokenizer, smol_template)
    assert e.value.status == 400 and e.value.param == param


# -- chat templates ------------------------------------------------------------------------------
def test_resolve_chat_template(tmp_path: Any) -> None:
    assert resolve_chat_template(None, "model's") == "model's"
    assert resolve_chat_template("chatml", "model's") == NAMED_TEMPLATES["chatml"]
    path = tmp_path / "t.jinja"
    path.write_text("{{ messages[0].content }}")
    assert resolve_chat_template(str(path), None) == "{{ messages[0].content }}"
    for spec, model in (("no-such-template", "x"), (None, None)):
        with pytest.raises(ChatTemplateError):
            resolve_chat_template(spec, model)


def test_render_named_templates_and_continuation(tokenizer: Any, smol_template: str) -> None:
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    chatml = render_chat(tokenizer, NAMED_TEMPLATES["chatml"], messages)
    assert chatml == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"
    assert render_chat(tokenizer, NAMED_TEMPLATES["plain"], messages) == "S\nU\n"
    llama = render_chat(tokenizer, NAMED_TEMPLATES["llama-3"], messages)
    assert llama.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n") and "U<|eot_id|>" in llama
    partial = [*messages, {"role": "assistant", "content": "The answer is"}]
    continued = render_chat(tokenizer, smol_template, partial, continue_final_message=True)
    assert continued.endswith("assistant\nThe answer is")
    # The model's template injects its default system prompt when none is given.
    assert "You are a helpful AI assistant named SmolLM" in render_chat(tokenizer, smol_template, messages[1:])
    ids = prompt_ids(tokenizer, chatml)
    assert ids[0] == tokenizer.convert_tokens_to_ids("<|im_start|>") and tokenizer.decode(ids) == chatml


def test_supports_tools(smol_template: str) -> None:
    assert not supports_tools(smol_template) and not supports_tools(NAMED_TEMPLATES["chatml"])
    assert supports_tools(NATIVE_TOOLS_TEMPLATE)


# -- tools: prompt, messages, grammar ------------------------------------------------------------
def test_tools_are_described_in_a_system_prompt_when_the_template_cannot(tokenizer: Any, smol_template: str) -> None:
    plan = chat_plan(chat(tools=[WEATHER]), tokenizer, smol_template)
    prompt = tokenizer.decode(plan.input.input_ids)
    assert prompt.startswith("<|im_start|>system\n# Tools") and '"name": "get_weather"' in prompt
    assert "SmolLM" not in prompt  # our system message replaces the template's default one
    assert plan.tools is not None and not plan.tools.forced and "json_schema" not in plan.input.sampling_params
    none = chat_plan(chat(tools=[WEATHER], tool_choice="none"), tokenizer, smol_template)
    assert none.tools is None and "<tools>" not in tokenizer.decode(none.input.input_ids)


def test_template_messages_without_native_tools() -> None:
    messages = [
        ChatMessage.model_validate(m)
        for m in (
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": None, "tool_calls": [_call()]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        )
    ]
    out = template_messages(messages, [WEATHER], native_tools=False)
    assert out[0]["role"] == "system" and out[0]["content"].startswith("Be brief.\n\n# Tools")
    assert out[2] == {
        "role": "assistant",
        "content": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    }
    assert out[3] == {"role": "user", "content": "<tool_response>\nsunny\n</tool_response>"}
    # What the assistant said in that format reads back as the same call.
    assert parse_tool_calls(out[2]["content"], NAMES).calls[0]["function"]["arguments"] == '{"city": "Paris"}'
    assert template_messages(messages[1:2], None, native_tools=False) == [{"role": "user", "content": "Weather?"}]


def test_native_tool_templates_get_tools_and_structured_messages(tokenizer: Any) -> None:
    history = [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "tool_calls": [_call()]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    plan = chat_plan(chat(messages=history, tools=[WEATHER]), tokenizer, NATIVE_TOOLS_TEMPLATE)
    prompt = tokenizer.decode(plan.input.input_ids)
    assert prompt.startswith('TOOLS:[{"type": "function", "function": {"name": "get_weather"')
    assert '"arguments": {"city": "Paris"}' in prompt and "[tool]sunny" in prompt and "# Tools" not in prompt


def _compiles(schema: str) -> None:
    xgr.Grammar.from_json_schema(schema)


def test_forced_tool_choice_constrains_output_to_a_parsable_call(tokenizer: Any, smol_template: str) -> None:
    named = {"type": "function", "function": {"name": "get_weather"}}
    plan = chat_plan(chat(tools=[WEATHER], tool_choice=named), tokenizer, smol_template)
    schema = json.loads(plan.input.sampling_params["json_schema"])
    assert schema["properties"]["name"] == {"const": "get_weather"}
    assert schema["properties"]["arguments"] == WEATHER["function"]["parameters"]
    assert plan.tools is not None and plan.tools.forced
    _compiles(plan.input.sampling_params["json_schema"])
    tools = [WEATHER, {"type": "function", "function": {"name": "get_time"}}]
    required = json.loads(forced_call_schema(tools, None, parallel=False))
    assert required["minItems"] == 1 and required["maxItems"] == 1 and len(required["items"]["anyOf"]) == 2
    _compiles(forced_call_schema(tools, None, parallel=True))
    # What these schemas admit is what the parser reads.
    assert parse_tool_calls('{"name": "get_weather", "arguments": {"city": "Oslo"}}', NAMES).calls
    two = '[{"name": "get_time", "arguments": {}}, {"name": "get_time", "arguments": {}}]'
    assert len(parse_tool_calls(two, NAMES).calls) == 2


# -- tool-call parsing ---------------------------------------------------------------------------
def _functions(text: str) -> list[tuple[str, dict]]:
    calls = parse_tool_calls(text, NAMES).calls
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


def test_parse_hermes_blocks() -> None:
    text = 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
    text += '<tool_call>{"name": "get_time", "parameters": {"tz": "CET"}}</tool_call> trailing'
    parsed = parse_tool_calls(text, NAMES)
    assert parsed.content == "Let me check.\n"
    assert _functions(text) == [("get_weather", {"city": "Paris"}), ("get_time", {"tz": "CET"})]
    call = parsed.calls[0]
    assert call["type"] == "function" and call["id"].startswith("call_") and call["id"] != parsed.calls[1]["id"]
    # Cut short after complete JSON (EOS before the closing tag); arguments given as a JSON string.
    cut = '<tool_call>{"name": "get_time", "arguments": "{\\"tz\\": \\"UTC\\"}"}'
    assert _functions(cut) == [("get_time", {"tz": "UTC"})]


@pytest.mark.parametrize(
    "text",
    [
        "no calls here",
        '<tool_call>{"name": "get_weather", "arguments": {"city": </tool_call>',  # broken JSON
        '<tool_call>{"name": "launch_rockets", "arguments": {}}</tool_call>',  # not a tool of the request
        '{"name": "get_weather", "arguments": 3}',
        '[{"nope": 1}, {"name": "launch_rockets", "arguments": {}}]',  # no item is a call
        '{"city": "Paris"}',
        'Say {"name": "get_time", "arguments": {}}',  # plain JSON counts only as the whole output
    ],
)
def test_text_that_is_no_call_stays_content(text: str) -> None:
    assert parse_tool_calls(text, NAMES) == ParsedOutput(text, [])


def test_parse_plain_json() -> None:
    text = ' {"name": "get_weather", "arguments": {"city": "Rome"}}\n'
    assert _functions(text) == [("get_weather", {"city": "Rome"})]
    assert parse_tool_calls('{"name": "get_time", "parameters": {}}', NAMES).content == ""


def _stream_pieces(text: str, forced: bool = False, step: int = 3) -> tuple[str, list[dict], list[str]]:
    stream = ToolCallStream(FORCED_FORMAT if forced else DEFAULT_FORMAT, NAMES)
    deltas = [stream.feed(text[start : start + step]) for start in range(0, len(text), step)]
    deltas.append(stream.finish())
    pieces = [d.content for d in deltas[:-1]]
    return "".join(d.content for d in deltas), merge_calls([c for d in deltas for c in d.calls]), pieces


@pytest.mark.parametrize("step", [1, 2, 5])
def test_tool_call_stream_agrees_with_the_final_parse(step: int) -> None:
    texts = [
        "Just words, no tools.",
        "Checking <tool_call>\n" + '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
        '{"name": "get_time", "arguments": {}}',
        "<tool_call> not json",
        "a < b but <tool not a call",
        '{"json": "but not a call"}',
    ]
    for text in texts:
        content, calls, _ = _stream_pieces(text, step=step)
        parsed = parse_tool_calls(text, NAMES)
        assert content == parsed.content
        assert [c["function"] for c in calls] == [c["function"] for c in parsed.calls]


def test_tool_call_stream_holds_back_what_may_be_a_call() -> None:
    _, _, pieces = _stream_pieces("Sure <tool_call>" + '{"name": "get_time", "arguments": {}}', step=1)
    assert "".join(pieces) == "Sure "  # the tag and the call never went out as content
    stream = ToolCallStream(DEFAULT_FORMAT, NAMES)
    assert stream.feed("ab<tool_").content == "ab" and stream.feed("x").content == "<tool_x"
    _, calls, pieces = _stream_pieces('{"name": "get_time", "arguments": {}}', forced=True)
    assert not any(pieces) and len(calls) == 1


# -- responses -----------------------------------------------------------------------------------
def test_usage_counts_each_prompt_once() -> None:
    metas = [output("", STOP, tokens=t)["meta_info"] for t in (1, 2, 3, 4)]
    metas[2] = {**metas[2], "prompt_tokens": 7, "cached_tokens": 0}
    got = usage(metas, n=2)
    assert got == {
        "prompt_tokens": 12,
        "completion_tokens": 10,
        "total_tokens": 22,
        "prompt_tokens_details": {"cached_tokens": 2},
    }


def test_finish_reasons() -> None:
    assert finish_reason({"finish_reason": None}) is None
    assert finish_reason({"finish_reason": STOP}) == "stop"
    assert finish_reason({"finish_reason": {"type": "stop", "matched": "\n"}}) == "stop"
    assert finish_reason({"finish_reason": {"type": "length", "length": 4}}) == "length"
    with pytest.raises(ApiError) as e:
        finish_reason({"finish_reason": {"type": "abort", "message": "grammar does not compile"}})
    assert e.value.status == 400 and "grammar does not compile" in e.value.message


def test_openai_error_names_openai_fields() -> None:
    names = native_names("messages", Constraint("response_format", "json_schema", "{}"))
    for native, field in [
        ("text", "messages"),
        ("input_ids", "messages"),
        ("sampling_params.max_new_tokens", "max_tokens"),
        ("sampling_params.top_p", "top_p"),
        ("sampling_params.json_schema", "response_format"),
        ("logprob_start_len", "logprob_start_len"),
    ]:
        assert openai_error(InvalidRequestError("bad", native), names).param == field
    assert openai_error(RuntimeError("bug"), names) is None


def test_completion_logprobs_format(tokenizer: Any) -> None:
    text = token_text(tokenizer)
    hi, space = tokenizer.encode("hi")[0], tokenizer.encode(" there")[0]
    pairs = [(None, hi), (-0.5, space), (float("-inf"), hi)]
    tops = [None, [(-0.5, space), (-1.0, hi)], [(-2.0, hi)]]
    body, end = completion_logprobs(pairs, tops, text, 10)
    assert body["tokens"] == ["hi", " there", "hi"]
    assert body["token_logprobs"] == [None, -0.5, MIN_LOGPROB]
    assert body["top_logprobs"] == [None, {" there": -0.5, "hi": -1.0}, {"hi": -2.0}]
    assert body["text_offset"] == [10, 12, 18] and end == 20


def _final_with_logprobs(text: str, tokenizer: Any, echo_prompt: str | None = None) -> dict[str, Any]:
    ids = tokenizer.encode(text)
    meta = {"output_token_logprobs": [(-0.25, t) for t in ids], "output_top_logprobs": [[(-0.25, t)] for t in ids]}
    if echo_prompt is not None:
        prompt = tokenizer.encode(echo_prompt)
        meta["input_token_logprobs"] = [(None, prompt[0])] + [(-1.0, t) for t in prompt[1:]]
        meta["input_top_logprobs"] = [None] + [[(-1.0, t)] for t in prompt[1:]]
    return output(text, STOP, tokens=len(ids), **meta)


def test_completion_response_matches_openai_types(tokenizer: Any) -> None:
    request = CompletionRequest.model_validate({"prompt": ["p1", "p2"], "n": 2, "logprobs": 1})
    plan = completion_plan(request, tokenizer.decode)
    outputs = [_final_with_logprobs(f"answer {i}", tokenizer) for i in range(4)]
    body = completion_response(HEADER, plan, outputs, token_text(tokenizer))
    parsed = Completion.model_validate(body)
    assert parsed.id == "id-1" and parsed.object == "text_completion" and parsed.model == "smol"
    assert [c.index for c in parsed.choices] == [0, 1, 2, 3] and parsed.choices[3].text == "answer 3"
    assert parsed.choices[0].finish_reason == "stop" and parsed.usage.prompt_tokens == 10
    assert "".join(parsed.choices[1].logprobs.tokens) == "answer 1"
    assert parsed.choices[1].logprobs.top_logprobs[0] == {"answer": -0.25}


def test_completion_echo_text_and_offsets(tokenizer: Any) -> None:
    """What the frontend's `select` relies on: prompt tokens scored, offsets into the echo."""
    request = CompletionRequest.model_validate({"prompt": "The sky is", "echo": True, "logprobs": 1, "max_tokens": 1})
    plan = completion_plan(request, tokenizer.decode)
    outputs = [_final_with_logprobs(" blue", tokenizer, "The sky is")]
    body = completion_response(HEADER, plan, outputs, token_text(tokenizer))
    choice = body["choices"][0]
    assert choice["text"] == "The sky is blue"
    lp = choice["logprobs"]
    assert "".join(lp["tokens"]) == "The sky is blue" and lp["token_logprobs"][:2] == [None, -1.0]
    assert [choice["text"][o : o + len(t)] for o, t in zip(lp["text_offset"], lp["tokens"])] == lp["tokens"]
    assert lp["top_logprobs"][0] is None and lp["token_logprobs"][-1] == -0.25


def test_chat_response_content_tool_calls_and_logprobs(tokenizer: Any, smol_template: str) -> None:
    plan = chat_plan(chat(tools=[WEATHER], logprobs=True, top_logprobs=1, n=2), tokenizer, smol_template)
    call_text = 'Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    outputs = [_final_with_logprobs("Hello there", tokenizer), _final_with_logprobs(call_text, tokenizer)]
    body = chat_response(HEADER, plan, outputs, token_text(tokenizer))
    parsed = ChatCompletion.model_validate(body)
    first, second = parsed.choices
    assert first.message.content == "Hello there" and first.finish_reason == "stop" and not first.message.tool_calls
    assert [t.token for t in first.logprobs.content] == ["Hello", " there"]
    assert first.logprobs.content[0].top_logprobs[0].logprob == -0.25
    assert bytes(first.logprobs.content[1].bytes) == b" there"
    assert second.finish_reason == "tool_calls" and second.message.content == "Sure."
    call = second.message.tool_calls[0]
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Oslo"}
    assert parsed.usage.prompt_tokens == 5  # one prompt, however many samples
    assert parsed.usage.completion_tokens == sum(len(o["output_ids"]) for o in outputs)


# -- streaming -----------------------------------------------------------------------------------
def test_per_choice_inputs_split_prompts_and_samples() -> None:
    obj = GenerateInput(text=["a", "b"], sampling_params={"n": 2, "seed": 10, "max_new_tokens": 3})
    inputs = per_choice_inputs(obj)
    assert [(i.text, i.sampling_params["seed"]) for i in inputs] == [("a", 10), ("a", 11), ("b", 10), ("b", 11)]
    assert all(i.stream and i.sampling_params["n"] == 1 and not i.is_batch for i in inputs)
    ids = per_choice_inputs(GenerateInput(input_ids=[1, 2], sampling_params={}))
    assert len(ids) == 1 and ids[0].input_ids == [1, 2] and ids[0].sampling_params["seed"] is None


def _cumulative(text: str, step: int = 4, finish: dict = STOP, **meta: Any) -> list[dict[str, Any]]:
    ends = [*range(step, len(text), step), len(text)]
    return [output(text[:e], finish if e == len(text) else None, tokens=k + 1, **meta) for k, e in enumerate(ends)]


def _run_chunker(chunker: Any, streams: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Interleaves the choices' outputs round-robin, as merged streams may arrive."""
    chunks = []
    for step in range(max(map(len, streams))):
        for index, outs in enumerate(streams):
            if step < len(outs):
                chunks += chunker.chunks(index, outs[step])
    return chunks + chunker.final()


def test_chat_chunks_stream_content_role_and_usage(tokenizer: Any, smol_template: str) -> None:
    plan = chat_plan(chat(n=2, stream=True, stream_options={"include_usage": True}), tokenizer, smol_template)
    texts = ["Hello there, friend.", "Bye."]
    chunks = _run_chunker(ChatChunker(HEADER, plan, token_text(tokenizer)), [_cumulative(t) for t in texts])
    parsed = [ChatCompletionChunk.model_validate(c) for c in chunks]
    assert all(c.id == "id-1" and c.object == "chat.completion.chunk" for c in parsed)
    for index, text in enumerate(texts):
        mine = [c.choices[0] for c in parsed if c.choices and c.choices[0].index == index]
        assert mine[0].delta.role == "assistant" and all(c.delta.role is None for c in mine[1:])
        assert "".join(c.delta.content or "" for c in mine) == text
        assert [c.finish_reason for c in mine][-1] == "stop" and all(c.finish_reason is None for c in mine[:-1])
    assert all(c.usage is None for c in parsed[:-1]) and parsed[-1].choices == []
    assert parsed[-1].usage.prompt_tokens == 5 and parsed[-1].usage.completion_tokens == 5 + 1


def test_chat_chunks_stream_tool_calls(tokenizer: Any, smol_template: str) -> None:
    plan = chat_plan(chat(tools=[WEATHER], stream=True), tokenizer, smol_template)
    text = 'On it. <tool_call>{"name": "get_weather", "arguments": {"city": "Lima"}}</tool_call>'
    chunks = _run_chunker(ChatChunker(HEADER, plan, token_text(tokenizer)), [_cumulative(text, step=3)])
    parsed = [ChatCompletionChunk.model_validate(c).choices[0] for c in chunks]
    assert "".join(c.delta.content or "" for c in parsed) == "On it. "
    assert parsed[-1].finish_reason == "tool_calls"
    deltas = [call.model_dump(exclude_none=True) for c in parsed for call in c.delta.tool_calls or []]
    (call,) = merge_calls(deltas)
    assert deltas[0]["index"] == 0 and call["id"].startswith("call_") and call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Lima"}
    assert len(deltas) > 2  # the arguments arrived in pieces, as they were written


def test_completion_chunks_with_echo_and_logprobs(tokenizer: Any) -> None:
    request = CompletionRequest.model_validate({"prompt": "Say", "echo": True, "logprobs": 0, "stream": True})
    plan = completion_plan(request, tokenizer.decode)
    words = tokenizer.encode(" one two three")
    outs = []
    for k in range(1, len(words) + 1):
        meta = {"output_token_logprobs": [(-0.5, t) for t in words[:k]], "output_top_logprobs": []}
        meta |= {"input_token_logprobs": [(None, tokenizer.encode("Say")[0])], "input_top_logprobs": [None]}
        outs.append(output(tokenizer.decode(words[:k]), STOP if k == len(words) else None, tokens=k, **meta))
    chunks = _run_chunker(CompletionChunker(HEADER, plan, token_text(tokenizer)), [outs])
    parsed = [Completion.model_construct(**c) for c in chunks]
    text = "".join(c["choices"][0]["text"] for c in chunks)
    assert text == "Say one two three" and len(parsed) == len(words)
    tokens = [t for c in chunks for t in c["choices"][0]["logprobs"]["tokens"]]
    offsets = [o for c in chunks for o in c["choices"][0]["logprobs"]["text_offset"]]
    assert "".join(tokens) == text and [text[o : o + len(t)] for o, t in zip(offsets, tokens)] == tokens
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop" and "usage" not in chunks[-1]


def test_cached_tokens_details_reach_sglext_only_when_asked_for(tokenizer: Any) -> None:
    details = {"device": 1, "host": 0, "storage": 1, "storage_backend": "file"}
    final = output("Hi", STOP, cached_tokens_details=details)
    for stream, wanted in ((False, True), (False, False), (True, True), (True, False)):
        body = {"prompt": "a", "stream": stream, "return_cached_tokens_details": wanted}
        body |= {"stream_options": {"include_usage": True}} if stream else {}
        plan = completion_plan(CompletionRequest.model_validate(body), str)
        if not stream:
            response = completion_response(HEADER, plan, [final], token_text(tokenizer))
            assert response.get("sglext") == ({"cached_tokens_details": details} if wanted else None)
            continue
        chunks = _run_chunker(CompletionChunker(HEADER, plan, token_text(tokenizer)), [[final]])
        extensions = [c for c in chunks if "sglext" in c]
        # Upstream's shape: one extra chunk with no choices, before the usage chunk (still last).
        assert [c["sglext"]["cached_tokens_details"] for c in extensions] == ([details] if wanted else [])
        assert all(c["choices"] == [] for c in extensions) and chunks[-1]["usage"]["prompt_tokens"] == 5
    # Without the hierarchical cache the split is unknown: nothing is added.
    plan = completion_plan(CompletionRequest.model_validate({"prompt": "a", "return_cached_tokens_details": True}), str)
    assert "sglext" not in completion_response(HEADER, plan, [output("Hi", STOP)], token_text(tokenizer))


async def _record(items: list[Any], events: list[str], name: str, delay: float = 0.0) -> AsyncIterator[Any]:
    try:
        for item in items:
            await asyncio.sleep(delay)
            if isinstance(item, Exception):
                raise item
            yield item
        events.append(f"{name} done")
    finally:
        events.append(f"{name} closed")


def test_merged_interleaves_and_closing_cancels_every_stream() -> None:
    async def scenario() -> None:
        events: list[str] = []
        got = [e async for e in merged([_record([1, 2], events, "a"), _record([3], events, "b")])]
        assert sorted(got) == [(0, 1), (0, 2), (1, 3)] and {"a done", "b done"} <= set(events)
        events.clear()
        stream = merged([_record([1] * 100, events, "a", 0.01), _record([2] * 100, events, "b", 0.01)])
        await anext(stream)
        await stream.aclose()
        assert sorted(events) == ["a closed", "b closed"]
        with pytest.raises(InvalidRequestError):
            [e async for e in merged([_record([1, 2], [], "a", 0.01), _record([InvalidRequestError("x")], [], "b")])]

    asyncio.run(scenario())


def test_merged_one_stream_reads_it_directly_and_closing_closes_it() -> None:
    async def scenario() -> None:
        events: list[str] = []
        tasks_before = len(asyncio.all_tasks())
        stream = merged([_record([1, 2, 3], events, "a", 0.01)])
        assert await anext(stream) == (0, 1)
        assert len(asyncio.all_tasks()) == tasks_before  # no pump task
        await stream.aclose()
        assert events == ["a closed"]
        assert [e async for e in merged([_record([4, 5], events, "b")])] == [(0, 4), (0, 5)]
        with pytest.raises(InvalidRequestError):
            [e async for e in merged([_record([1, InvalidRequestError("x")], [], "c")])]

    asyncio.run(scenario())


# -- routes, through the official client over a scripted manager ---------------------------------
class ScriptedManager:
    """Answers like `TokenizerManager.generate`: validates with the runtime's own parsing, then
    plays `text` back (cumulatively when streaming, slowly with `delay`); records every call and
    every generation that ended before finishing (what the real manager aborts)."""

    def __init__(self, text: str = "Hello world", delay: float = 0.0) -> None:
        self.text, self.delay = text, delay
        self.inputs: list[GenerateInput] = []
        self.unfinished = 0

    async def generate(self, obj: GenerateInput) -> AsyncIterator[Any]:
        self.inputs.append(obj)
        items = obj.split()
        for item in items:
            try:
                item.params.validate(49152)
            except SamplingParamsError as e:
                raise InvalidRequestError(str(e), f"sampling_params.{e.field}") from None
            if item.text is not None and len(item.text) > 1000:
                raise InvalidRequestError("the prompt has too many tokens", "text")
        finished = False
        try:
            if obj.stream:
                for out in _cumulative(self.text, step=3):
                    await asyncio.sleep(self.delay)
                    yield out
            else:
                outs = [output(self.text, STOP) for item in items for _ in range(item.params.n)]
                yield outs if obj.is_batch or len(outs) > 1 else outs[0]
            finished = True
        finally:
            self.unfinished += not finished


def make_app(tokenizer: Any, manager: ScriptedManager) -> FastAPI:
    app = FastAPI()
    known = {"model_path": "/models/smol", "chat_template": tokenizer.chat_template, "context_length": 2048}
    known |= {"vocab_size": 49152, "eos_token_ids": (2,)}
    # Fields these routes do not read stay None, so the double survives new ReadyInfo fields.
    info = ReadyInfo(**{f.name: known.get(f.name) for f in dataclasses.fields(ReadyInfo)})
    app.state.server = ServerState(ServerArgs(served_model_name="smol"), info, tokenizer, manager)  # type: ignore[arg-type]
    app.add_exception_handler(ApiError, lambda request, exc: error_response(exc))  # type: ignore[arg-type]
    app.include_router(openai_router)
    return app


def client_for(app: FastAPI) -> openai.AsyncOpenAI:
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")
    return openai.AsyncOpenAI(base_url="http://test/v1", api_key="none", http_client=http, max_retries=0)


def test_routes_with_the_official_client(tokenizer: Any) -> None:
    manager = ScriptedManager()
    client = client_for(make_app(tokenizer, manager))

    async def scenario() -> None:
        models = await client.models.list()
        assert [m.id for m in models.data] == ["smol"] and (await client.models.retrieve("smol")).id == "smol"
        completion = await client.completions.create(model="smol", prompt=["a", "b"], n=2, max_tokens=4)
        assert [c.text for c in completion.choices] == ["Hello world"] * 4 and completion.id.startswith("cmpl-")
        assert completion.usage.prompt_tokens == 10 and completion.usage.completion_tokens == 12
        reply = await client.chat.completions.create(model="smol", messages=[{"role": "user", "content": "Hi"}])
        assert reply.choices[0].message.content == "Hello world" and reply.id.startswith("chatcmpl-")
        assert reply.usage.prompt_tokens_details.cached_tokens == 2
        stream = await client.chat.completions.create(
            model="smol",
            messages=[{"role": "user", "content": "Hi"}],
            stream=True,
            n=2,
            seed=5,
            stream_options={"include_usage": True},
        )
        chunks = [chunk async for chunk in stream]
        second = [c.choices[0] for c in chunks if c.choices and c.choices[0].index == 1]
        assert "".join(c.delta.content or "" for c in second) == "Hello world"
        assert chunks[-1].usage.completion_tokens == 8
        assert [i.sampling_params["seed"] for i in manager.inputs[-2:]] == [5, 6]
        stream = await client.completions.create(model="smol", prompt="a", stream=True, echo=True)
        assert "".join([c.choices[0].text async for c in stream]) == "aHello world"
        with pytest.raises(openai.NotFoundError):
            await client.chat.completions.create(model="gpt-4", messages=[{"role": "user", "content": "Hi"}])
        with pytest.raises(openai.BadRequestError) as e:
            await client.completions.create(model="smol", prompt="x" * 2000)
        assert e.value.body["param"] == "prompt"
        with pytest.raises(openai.BadRequestError) as e:
            await client.completions.create(model="smol", prompt="x", temperature=-1, stream=True)
        assert e.value.body["param"] == "temperature"

    asyncio.run(scenario())
    assert manager.unfinished == 0


def test_tool_calls_round_trip_through_the_official_client(tokenizer: Any) -> None:
    manager = ScriptedManager('[{"name": "get_weather", "arguments": {"city": "Quito"}}]')
    client = client_for(make_app(tokenizer, manager))

    async def scenario() -> None:
        messages: list[Any] = [{"role": "user", "content": "Weather in Quito?"}]
        reply = await client.chat.completions.create(
            model="smol", messages=messages, tools=[WEATHER], tool_choice="required"
        )
        choice = reply.choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.content is None
        assert json.loads(choice.message.tool_calls[0].function.arguments) == {"city": "Quito"}
        assert "json_schema" in manager.inputs[-1].sampling_params
        # The usual loop: the reply message goes back as is, then the tool's result.
        call_id = choice.message.tool_calls[0].id
        messages += [choice.message, {"role": "tool", "tool_call_id": call_id, "content": "22 C"}]
        manager.text = "It is 22 C."
        final = await client.chat.completions.create(model="smol", messages=messages, tools=[WEATHER])
        assert final.choices[0].message.content == "It is 22 C." and final.choices[0].finish_reason == "stop"
        prompt = tokenizer.decode(manager.inputs[-1].input_ids)
        assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Quito"}}' in prompt
        assert "<tool_response>\n22 C\n</tool_response>" in prompt

    asyncio.run(scenario())


def test_stream_errors_after_start_become_an_error_event(tokenizer: Any) -> None:
    class Aborting(ScriptedManager):
        async def generate(self, obj: GenerateInput) -> AsyncIterator[Any]:
            yield output("Hel", None)
            yield output("Hel", {"type": "abort", "message": "out of KV cache"})

    async def scenario() -> list[bytes]:
        plan = completion_plan(CompletionRequest.model_validate({"prompt": "a", "stream": True}), str)
        chunker = CompletionChunker(HEADER, plan, token_text(tokenizer))
        response = await open_stream(Aborting(), plan.input, chunker, plan.names)  # type: ignore[arg-type]
        return [part async for part in response.body_iterator]  # type: ignore[misc]

    parts = asyncio.run(scenario())
    assert json.loads(parts[0].removeprefix(b"data: "))["choices"][0]["text"] == "Hel"
    error = json.loads(parts[1].removeprefix(b"data: "))["error"]
    assert error["code"] == 400 and "out of KV cache" in error["message"] and parts[2] == SSE_DONE


def test_client_going_away_stops_generation(tokenizer: Any) -> None:
    manager = ScriptedManager("x" * 300, delay=0.01)

    async def scenario() -> None:
        plan = completion_plan(CompletionRequest.model_validate({"prompt": "a", "n": 3, "stream": True}), str)
        response = await open_stream(manager, plan.input, CompletionChunker(HEADER, plan, str), plan.names)  # type: ignore[arg-type]
        body = response.body_iterator
        await anext(body)  # type: ignore[call-overload]
        consumer = asyncio.create_task(_drain(body))
        await asyncio.sleep(0.05)
        consumer.cancel()  # what Starlette does when the client disconnects
        await asyncio.gather(consumer, return_exceptions=True)

    asyncio.run(scenario())
    assert manager.unfinished == 3


async def _drain(body: Any) -> None:
    async for _ in body:
        pass


# -- reasoning and tool-call parsers in chat -----------------------------------------------------
def test_chat_separates_reasoning_then_parses_calls(tokenizer: Any, smol_template: str) -> None:
    call = '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Lima"}}]'
    text = f"<think>Need weather.</think>On it. {call}"
    plan = chat_plan(chat(tools=[WEATHER], stream=True), tokenizer, smol_template, "qwen3", "mistral")
    chunks = _run_chunker(ChatChunker(HEADER, plan, token_text(tokenizer)), [_cumulative(text, step=3)])
    parsed = [ChatCompletionChunk.model_validate(c).choices[0] for c in chunks]
    assert "".join(getattr(c.delta, "reasoning_content", None) or "" for c in parsed) == "Need weather."
    assert "".join(c.delta.content or "" for c in parsed) == "On it. "
    deltas = [call.model_dump(exclude_none=True) for c in parsed for call in c.delta.tool_calls or []]
    assert _functions_of(merge_calls(deltas)) == [("get_weather", {"city": "Lima"})]
    assert parsed[-1].finish_reason == "tool_calls"
    whole = chat_response(HEADER, plan, [output(text, STOP)], token_text(tokenizer))["choices"][0]
    assert whole["message"]["reasoning_content"] == "Need weather." and whole["message"]["content"] == "On it."
    assert _functions_of(whole["message"]["tool_calls"]) == [("get_weather", {"city": "Lima"})]
    assert whole["finish_reason"] == "tool_calls"


def _functions_of(calls: list[dict[str, Any]]) -> list[tuple[str, dict]]:
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


def test_reasoning_switches_in_the_plan(tokenizer: Any, smol_template: str) -> None:
    assert chat_plan(chat(), tokenizer, smol_template).reasoning is None  # no parser configured
    assert chat_plan(chat(separate_reasoning=False), tokenizer, smol_template, "qwen3").reasoning is None
    forced = chat(tools=[WEATHER], tool_choice="required")
    assert chat_plan(forced, tokenizer, smol_template, "deepseek-r1").reasoning is None  # the output is all call
    plan = chat_plan(chat(reasoning_effort="none"), tokenizer, smol_template, "deepseek-r1")
    assert plan.reasoning is not None
    assert plan.reasoning.template_kwargs == {"thinking": False, "enable_thinking": False}
    message = chat_response(HEADER, plan, [output("a</think>b", STOP)], token_text(tokenizer))["choices"][0]["message"]
    assert message["content"] == "a</think>b" and message["reasoning_content"] is None  # R1 not forced: no thought
    explicit = chat(reasoning_effort="none", chat_template_kwargs={"enable_thinking": True})
    kwargs = chat_plan(explicit, tokenizer, smol_template, "deepseek-r1").reasoning.template_kwargs
    assert kwargs == {"thinking": False, "enable_thinking": True}  # the client's own switch wins


def test_parsed_outputs_keep_special_tokens_unless_the_client_says(tokenizer: Any, smol_template: str) -> None:
    def skip(body: dict[str, Any], reasoning: str | None = None) -> Any:
        plan = chat_plan(chat(**body), tokenizer, smol_template, reasoning)
        return plan.input.sampling_params.get("skip_special_tokens")

    assert skip({}) is None and skip({}, "qwen3") is None  # `<think>` is ordinary text
    assert skip({"tools": [WEATHER]}) is False and skip({}, "gpt-oss") is False  # markers may be special tokens
    assert skip({"tools": [WEATHER], "skip_special_tokens": True}) is True
    assert skip({"tools": [WEATHER], "tool_choice": "none"}) is None
