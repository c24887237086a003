"""OpenAI request bodies for /v1/completions and /v1/chat/completions, as pydantic models.

Unknown fields are rejected (FastAPI answers 400), as OpenAI does, with three exceptions: the
SGLang sampling extras that upstream SGLang accepts (`top_k`, `min_p`, `stop_regex`, ...: every
field of the runtime's `SamplingParams` that OpenAI does not name itself, derived from it, so
they are typed in one place), upstream's other extras (`upstream_fields.OPENAI`: accepted at
their default, refused by `sampling.refuse_missing` otherwise), and a few OpenAI fields that
change nothing for a self-hosted model (`user`, `metadata`, `store`, `service_tier`, ...).
Types and ranges of the sampling extras are checked by `SamplingParams` itself; these models
check the rest.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    WithJsonSchema,
    create_model,
    model_validator,
)

from sglang.runtime.requests import upstream_fields
from sglang.runtime.requests.request_schema import SAMPLING_RANGES, missing_feature_schema, sampling_params_schema
from sglang.runtime.requests.sampling_params import SamplingParams


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def has_lone_surrogate(value: Any) -> bool:
    """Whether a JSON value holds a string that is not valid Unicode text: `"\\ud800"` is valid
    JSON, but no tokenizer (nor UTF-8) takes a lone surrogate. Iterative: no depth limit."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            try:
                item.encode()
            except UnicodeEncodeError:
                return True
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return False


class UnicodeBody(_Strict):
    """A request body whose strings must be valid Unicode text (a 400 otherwise, not a tokenizer
    error deep inside the handler)."""

    @model_validator(mode="before")
    @classmethod
    def _valid_text(cls, data: Any) -> Any:
        if has_lone_surrogate(data):
            raise ValueError("a string holds a lone surrogate (\\ud800-\\udfff): not valid Unicode text")
        return data


class StreamOptions(_Strict):
    include_usage: bool = False


OPENAI_NAMED = frozenset(
    {
        "max_new_tokens",
        "min_new_tokens",
        "n",
        "temperature",
        "top_p",
        "frequency_penalty",
        "presence_penalty",
        "logit_bias",
        "seed",
        "stop",
        "json_schema",
        "regex",
        "ebnf",
    }
)
"""Sampling fields declared below under OpenAI's name (`max_tokens`, `min_tokens`) or their own,
and the grammars, which go through `sampling.pick_grammar`."""

SAMPLING_EXTRAS = tuple(f.name for f in dataclasses.fields(SamplingParams) if f.name not in OPENAI_NAMED)
"""Passed to the runtime as they are when set; `SamplingParams.from_dict` checks their types."""


def _published(name: str) -> Any:
    """An extra's type: any value here (the runtime checks it), its real schema in OpenAPI."""
    if name in upstream_fields.OPENAI:
        schema = missing_feature_schema(upstream_fields.OPENAI[name])
    else:
        schema = sampling_params_schema()["properties"][name]
    return Annotated[Any, WithJsonSchema(schema)]


def _bounded(default: Any, name: str) -> Any:
    """A field whose range `SamplingParams.validate` checks, published with that range."""
    return Field(default, json_schema_extra=SAMPLING_RANGES[name])


SamplingExtras = create_model(
    "SamplingExtras",
    __base__=UnicodeBody,
    **{name: (_published(name), None) for name in (*SAMPLING_EXTRAS, *upstream_fields.OPENAI)},
)
"""The SGLang sampling extras and upstream's other extras, as every OpenAI-shaped body takes them
(completions, chat, and the Responses API's `ResponsesRequest`)."""


class SamplingFields(SamplingExtras):
    """What both endpoints share: the model, OpenAI's sampling knobs, streaming, SGLang extras.
    `None` means "SGLang's default" for every optional sampling value."""

    model: str | None = None
    bootstrap_host: StrictStr | None = None
    """Prefill-decode disaggregation: the router's prefill host, bootstrap port and room."""
    bootstrap_port: StrictInt | None = None
    bootstrap_room: StrictInt | None = None
    n: int = _bounded(1, "n")
    temperature: float | None = _bounded(None, "temperature")
    top_p: float | None = _bounded(None, "top_p")
    frequency_penalty: float | None = _bounded(None, "frequency_penalty")
    presence_penalty: float | None = _bounded(None, "presence_penalty")
    logit_bias: dict[str, float] | None = None
    seed: int | None = _bounded(None, "seed")
    stop: str | list[str] | None = None
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    return_cached_tokens_details: StrictBool = False
    """Upstream's: the prompt's cached tokens per cache tier, in the response's `sglext`."""
    # Accepted for compatibility; they have no meaning for a self-hosted model.
    user: str | None = None
    metadata: dict[str, Any] | None = None
    store: bool | None = None
    service_tier: str | None = None
    # SGLang's extras besides the derived ones.
    min_tokens: int = _bounded(0, "min_new_tokens")
    regex: str | None = None
    ebnf: str | None = None
    rid: StrictStr | list[StrictStr] | None = None
    priority: StrictInt | None = None


_TEXT = {"type": "string", "minLength": 1}
_IDS = {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 1}
PROMPT_SCHEMA = {
    "anyOf": [
        _TEXT,
        {"type": "array", "items": _TEXT, "minItems": 1},
        _IDS,
        {"type": "array", "items": _IDS, "minItems": 1},
    ]
}
"""`prompt` as the runtime checks it: no empty prompt, no negative token id (the vocabulary's
upper bound is the served model's, checked by validation alone)."""


class CompletionRequest(SamplingFields):
    """`prompt`: a string, a list of strings, token ids, or a list of token-id lists. `max_tokens`
    defaults to 16 as in OpenAI; `null` means up to the context length. `suffix` is refused when
    set, and `best_of` unless it equals `n`."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"prompt": "The capital of France is", "max_tokens": 8}]})
    prompt: Annotated[
        StrictStr | list[StrictStr] | list[StrictInt] | list[list[StrictInt]], WithJsonSchema(PROMPT_SCHEMA)
    ]
    max_tokens: int | None = Field(16, ge=0)
    echo: bool = False
    logprobs: int | None = Field(None, ge=0, le=20)
    best_of: int | None = None
    suffix: Annotated[str | None, WithJsonSchema({"type": "null"})] = None
    json_schema: str | None = None


class TextPart(_Strict):
    type: Literal["text"]
    text: str


class FunctionCall(_Strict):
    name: str
    arguments: str


class ToolCall(_Strict):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(_Strict):
    """One message. Content is a string or a list of text parts; only an assistant message
    carrying `tool_calls` may omit it. `developer` is OpenAI's newer name for `system`."""

    # `_content_present`, published: content and no calls, or an assistant's calls.
    model_config = ConfigDict(
        json_schema_extra={
            "anyOf": [
                {
                    "required": ["content"],
                    "properties": {"content": {"not": {"type": "null"}}, "tool_calls": {"type": "null"}},
                },
                {
                    "required": ["tool_calls"],
                    "properties": {"role": {"const": "assistant"}, "tool_calls": {"type": "array", "minItems": 1}},
                },
            ]
        }
    )

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    # What the openai client sends back when an earlier response message is appended as is.
    refusal: str | None = None
    reasoning_content: str | None = None

    @model_validator(mode="after")
    def _content_present(self) -> ChatMessage:
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise ValueError(f"{self.role!r} message needs content")
        if self.tool_calls and self.role != "assistant":
            raise ValueError("only assistant messages carry tool_calls")
        return self

    def text(self) -> str:
        """The content as one string; text parts are joined by newlines."""
        if isinstance(self.content, list):
            return "\n".join(part.text for part in self.content)
        return self.content or ""


class FunctionDefinition(_Strict):
    name: str = Field(pattern=r"^[a-zA-Z0-9_.-]{1,64}$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(_Strict):
    type: Literal["function"] = "function"
    function: FunctionDefinition


class NamedFunction(_Strict):
    name: str


class NamedToolChoice(_Strict):
    type: Literal["function"] = "function"
    function: NamedFunction


class JsonSchemaFormat(_Strict):
    name: str
    description: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None


class ResponseFormat(_Strict):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_given(self) -> ResponseFormat:
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError("response_format of type json_schema needs a json_schema")
        return self


ToolChoice = Literal["none", "auto", "required"] | NamedToolChoice


class ChatCompletionRequest(SamplingFields):
    """`max_completion_tokens` (or the older `max_tokens`) defaults to the context's room.
    `tool_choice` defaults to "auto" with tools, "none" without."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 8}]}
    )
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    response_format: ResponseFormat | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool = True
    # SGLang's chat extras. The reasoning switches act with --reasoning-parser and change nothing
    # without one, as upstream; chat_template_kwargs reach the template (enable_thinking also
    # tells the parser whether the output starts inside a thought).
    continue_final_message: bool = False
    chat_template_kwargs: dict[str, Any] | None = None
    separate_reasoning: bool = True
    stream_reasoning: bool = True
    reasoning_effort: str | None = None
