"""The Ollama adapter without an engine: options -> sampling parameters, chat and generate
requests -> the OpenAI requests the server runs, and the NDJSON chunks of a streamed output.
The official client over a real server is in tests/clients/test_api_clients.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from sglang.runtime.parsers import tool_format
from sglang.runtime.server.errors import ApiError
from sglang.runtime.server.ollama.convert import chat_request, generate_request, sampling_fields
from sglang.runtime.server.ollama.protocol import ChatRequest, GenerateRequest
from sglang.runtime.server.ollama.responses import ChunkStream, assistant_message, done_fields, split_thinking
from sglang.runtime.server.openai.chat import ReasoningSplit, ToolParsing
from sglang.runtime.server.openai.protocol import ChatCompletionRequest, CompletionRequest

THINK = ReasoningSplit("qwen3", None, stream_reasoning=True)
TOOLS = ToolParsing(frozenset({"get_weather"}), forced=False, fmt=tool_format(None))
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def output(text: str, finish: dict | None = None) -> dict[str, Any]:
    meta = {"prompt_tokens": 5, "completion_tokens": 2, "finish_reason": finish, "e2e_latency": 0.5, "ttft": 0.1}
    return {"text": text, "meta_info": meta}


def test_options_map_to_sampling_fields() -> None:
    options = {"num_predict": 7, "temperature": 0.2, "top_k": 4, "repeat_penalty": 1.1, "stop": ["x"], "num_ctx": 2048}
    assert sampling_fields(options) == {
        "max_tokens": 7,
        "temperature": 0.2,
        "top_k": 4,
        "repetition_penalty": 1.1,
        "stop": ["x"],
    }
    assert sampling_fields({"num_predict": -1}) == {}  # no limit
    for bad in ({"mirostat": 1}, {"num_predict": 0}, {"num_predict": "many"}):
        with pytest.raises(ApiError, match="options") as refused:
            sampling_fields(bad)
        assert refused.value.status == 400


def test_chat_request_conversion() -> None:
    body = ChatRequest.model_validate(
        {
            "model": "m",
            "messages": [
                {"role": "user", "content": "Weather?"},
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
                },
                {"role": "tool", "content": "Sunny", "tool_name": "get_weather"},
            ],
            "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}],
            "format": {"type": "object"},
            "options": {"seed": 3},
        }
    )
    chat = chat_request(body)
    assert [m.role for m in chat.messages] == ["user", "assistant", "tool"]
    assert json.loads((chat.messages[1].tool_calls or [])[0].function.arguments) == {"city": "Paris"}
    assert chat.messages[2].name == "get_weather" and chat.seed == 3
    assert chat.response_format is not None and chat.response_format.type == "json_schema"
    assert chat.tools is not None and chat.max_tokens is None  # Ollama's default: no limit


def test_generate_request_conversion_and_refusals() -> None:
    templated = generate_request(
        GenerateRequest.model_validate({"model": "m", "prompt": "Hi", "system": "Be brief.", "format": "json"})
    )
    assert isinstance(templated, ChatCompletionRequest)
    assert [(m.role, m.text()) for m in templated.messages] == [("system", "Be brief."), ("user", "Hi")]
    assert templated.response_format is not None and templated.response_format.type == "json_object"
    raw = generate_request(GenerateRequest.model_validate({"model": "m", "prompt": "Hi", "raw": True}))
    assert isinstance(raw, CompletionRequest) and raw.prompt == "Hi" and raw.max_tokens is None
    for field, value in (("images", ["AA=="]), ("suffix", "end"), ("context", [1, 2])):
        with pytest.raises(ApiError, match=field):
            generate_request(GenerateRequest.model_validate({"model": "m", "prompt": "Hi", field: value}))
    with pytest.raises(ApiError, match="think"):  # thinking is switched by the template a raw prompt skips
        generate_request(GenerateRequest.model_validate({"model": "m", "prompt": "Hi", "raw": True, "think": True}))
    thinking = generate_request(GenerateRequest.model_validate({"model": "m", "prompt": "Hi", "think": False}))
    assert thinking.chat_template_kwargs == {"enable_thinking": False, "thinking": False}


def test_thinking_is_separated_whole_and_streamed() -> None:
    split = split_thinking("<think>plan</think>Paris.", THINK)
    assert (split.reasoning, split.content) == ("plan", "Paris.")
    message = assistant_message(split.content, None, split.reasoning)
    assert message == {"role": "assistant", "content": "Paris.", "thinking": "plan"}
    stream = ChunkStream("m", True, None, THINK)
    text, chunks = "", []
    for k, piece in enumerate(["<thi", "nk>pl", "an</th", "ink>Par", "is."]):
        text += piece
        chunks += stream.update(output(text, {"type": "stop"} if k == 4 else None))
    assert "".join(c["message"].get("thinking", "") for c in chunks) == "plan"
    assert "".join(c["message"]["content"] for c in chunks) == "Paris."


def test_final_fields_and_tool_calls() -> None:
    done = done_fields(output("", {"type": "length"})["meta_info"])
    assert done["done"] and done["done_reason"] == "length"
    assert (done["prompt_eval_count"], done["eval_count"], done["total_duration"]) == (5, 2, 500_000_000)
    assert done["prompt_eval_duration"] + done["eval_duration"] == done["total_duration"]
    message = assistant_message("Let me check. " + CALL, TOOLS)
    assert message["content"] == "Let me check."
    assert message["tool_calls"] == [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]


@pytest.mark.parametrize("chat", [True, False])
def test_stream_chunks_end_with_done(chat: bool) -> None:
    stream = ChunkStream("m", chat, TOOLS if chat else None)
    pieces = ["Hello", " there. ", CALL if chat else "Bye"]
    text, chunks = "", []
    for k, piece in enumerate(pieces):
        text += piece
        chunks += stream.update(output(text, {"type": "stop", "matched": 2} if k == len(pieces) - 1 else None))
    assert [c["done"] for c in chunks] == [False] * (len(chunks) - 1) + [True]
    assert chunks[-1]["done_reason"] == "stop" and chunks[-1]["eval_count"] == 2
    if chat:
        assert "".join(c["message"]["content"] for c in chunks) == "Hello there. "
        assert chunks[-1]["message"]["tool_calls"][0]["function"]["arguments"] == {"city": "Paris"}
    else:
        assert "".join(c["response"] for c in chunks) == "Hello there. Bye"
