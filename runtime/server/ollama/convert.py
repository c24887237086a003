"""Ollama requests as the OpenAI requests the server already runs.

/api/chat becomes a chat request (template, tools, forced formats: `openai.chat.chat_plan`);
/api/generate becomes a chat request of one user turn (after `system`), as Ollama renders a
prompt with the model's template, or with `raw` a completion request of the prompt as it is.

`options` map to sampling parameters: `num_predict` -> `max_tokens` (negative: no limit, up to
the context), `repeat_penalty` -> `repetition_penalty`, and `temperature`, `top_p`, `top_k`,
`min_p`, `seed`, `presence_penalty`, `frequency_penalty`, `stop` as they are. Load-time options
(`num_ctx`, `num_gpu`, ...) are accepted and change nothing: the server's model is loaded
already. Any other option is a 400 that names it, as is every request field whose feature this
server lacks. `format` `json` -> `response_format: json_object`; a schema -> `json_schema`.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ValidationError

from sglang.runtime.server.errors import ApiError
from sglang.runtime.server.ollama.protocol import ChatRequest, GenerateRequest, Message, _Generation
from sglang.runtime.server.openai.protocol import ChatCompletionRequest, CompletionRequest

SAMPLING_OPTIONS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "seed": "seed",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "repeat_penalty": "repetition_penalty",
    "stop": "stop",
}
"""Ollama option -> OpenAI request field (SGLang's sampling extras included)."""

LOAD_TIME_OPTIONS = frozenset(
    {
        "numa",
        "num_ctx",
        "num_batch",
        "num_gpu",
        "main_gpu",
        "low_vram",
        "f16_kv",
        "logits_all",
        "vocab_only",
        "use_mmap",
        "use_mlock",
        "embedding_only",
        "num_thread",
        "num_keep",
    }
)

TEXT_ONLY = "this server serves a text-only model; images are not supported"


def _refuse(field: str, why: str) -> ApiError:
    return ApiError(400, f"{field}: {why}", field)


def sampling_fields(options: dict[str, Any] | None) -> dict[str, Any]:
    """The OpenAI request fields `options` ask for."""
    fields: dict[str, Any] = {}
    for key, value in (options or {}).items():
        if key in LOAD_TIME_OPTIONS:
            continue
        if key == "num_predict":
            if not isinstance(value, int) or isinstance(value, bool) or value == 0:
                raise _refuse("options.num_predict", "must be a positive integer, or negative for no limit")
            if value > 0:
                fields["max_tokens"] = value
        elif key in SAMPLING_OPTIONS:
            fields[SAMPLING_OPTIONS[key]] = value
        else:
            raise _refuse(f"options.{key}", "this option is not supported by this server")
    return fields


def _common_fields(request: _Generation) -> dict[str, Any]:
    if request.logprobs or request.top_logprobs:
        raise _refuse("logprobs", "log probabilities are not served on the Ollama API; use /v1/chat/completions")
    fields = {"model": request.model, **sampling_fields(request.options)}
    if request.think is not None:
        # Templates read `enable_thinking` (Qwen3, GLM-4.5) or `thinking` (DeepSeek-V3, Kimi K2).
        fields["chat_template_kwargs"] = dict.fromkeys(("enable_thinking", "thinking"), bool(request.think))
    if request.format == "json":
        fields["response_format"] = {"type": "json_object"}
    elif isinstance(request.format, dict):
        fields["response_format"] = {"type": "json_schema", "json_schema": {"name": "format", "schema": request.format}}
    return fields


def _message(message: Message, index: int) -> dict[str, Any]:
    if message.images:
        raise _refuse(f"messages.{index}.images", TEXT_ONLY)
    out: dict[str, Any] = {"role": message.role, "content": message.content or ""}
    if message.role == "tool":
        out["tool_call_id"] = message.tool_call_id
        out["name"] = message.tool_name
    if message.tool_calls:
        out["tool_calls"] = [
            {
                "id": call.id or f"call_{index}_{k}",
                "type": "function",
                "function": {"name": call.function.name, "arguments": json.dumps(call.function.arguments)},
            }
            for k, call in enumerate(message.tool_calls)
        ]
    return out


def _validated(model: type[BaseModel], fields: dict[str, Any]) -> Any:
    try:
        return model.model_validate(fields)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ApiError(400, f"{first['msg']} ({where})", where) from None


def chat_request(request: ChatRequest) -> ChatCompletionRequest:
    """The chat request that runs /api/chat `request` (which has messages)."""
    fields = _common_fields(request)
    fields["messages"] = [_message(m, i) for i, m in enumerate(request.messages)]
    fields["tools"] = request.tools or None
    return _validated(ChatCompletionRequest, fields)


def generate_request(request: GenerateRequest) -> ChatCompletionRequest | CompletionRequest:
    """The request that runs /api/generate `request` (which has a prompt)."""
    unsupported = {
        "suffix": "fill-in-the-middle is not supported",
        "template": "this server renders prompts with its own chat template",
        "context": "send the conversation to /api/chat instead",
        "images": TEXT_ONLY,
        "width": "image generation is not supported",
        "height": "image generation is not supported",
        "steps": "image generation is not supported",
    }
    for field, why in unsupported.items():
        if getattr(request, field):
            raise _refuse(field, why)
    fields = _common_fields(request)
    if request.raw and request.think is not None:
        raise _refuse("think", "a raw prompt gets no chat template, which is what turns thinking on or off")
    if request.raw:
        # Raw prompts get no template, so no system prompt either (as in Ollama).
        # Without num_predict there is no limit, as in Ollama (not OpenAI's 16).
        return _validated(CompletionRequest, {"max_tokens": None, **fields, "prompt": request.prompt})
    system = [{"role": "system", "content": request.system}] if request.system else []
    return _validated(
        ChatCompletionRequest, {**fields, "messages": [*system, {"role": "user", "content": request.prompt}]}
    )
