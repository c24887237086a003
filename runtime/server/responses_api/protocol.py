"""OpenAI Responses request bodies (POST /v1/responses), as pydantic models.

Field names and defaults follow OpenAI's API and upstream SGLang's `ResponsesRequest`. Unknown
fields are rejected (400), as on the other OpenAI routes; input items of types this server does
not serve parse, so that the refusal can name them (`convert.py`). An output item a client
replays as input (`input = [*earlier, *response.output]`, the usual way to continue a
conversation without the store) parses with every field the response gave it. Fields that
address OpenAI's service (`metadata`, `user`, `service_tier`, `prompt_cache_key`,
`safety_identifier`, `include` but for logprobs, `truncation`) or only its hosted tools
(`max_tool_calls`) are accepted; `metadata` is echoed back, the rest change nothing for a
self-hosted model. The SGLang sampling extras (`top_k`, `min_p`, `stop`, ...) and grammars
(`regex`, `ebnf`) are those of the chat route, passed on as they are.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, StrictBool, Tag

from sglang.runtime.server.openai.protocol import SamplingExtras

INT64_MAX = (1 << 63) - 1
"""The bound of the integers a response echoes (its JSON encoder takes 64-bit integers)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class InputText(_Strict):
    type: Literal["input_text"]
    text: str


class OutputText(_Strict):
    """An earlier answer's text, as a replayed output message carries it."""

    type: Literal["output_text"]
    text: str
    annotations: list[Any] | None = None
    logprobs: list[Any] | None = None


class Refusal(_Strict):
    type: Literal["refusal"]
    refusal: str


class MediaPart(_Strict):
    """Parsed so that the refusal can say why (this server serves a text-only model)."""

    model_config = ConfigDict(extra="allow")
    type: Literal["input_image", "input_file", "input_audio"]


ContentPart = Annotated[InputText | OutputText | Refusal | MediaPart, Field(discriminator="type")]


class MessageItem(_Strict):
    """A turn: `{"role": "user", "content": "..."}` (the short form) or a typed message item."""

    type: Literal["message"] = "message"
    role: Literal["user", "system", "developer", "assistant"]
    content: str | list[ContentPart]
    id: str | None = None
    status: str | None = None


class FunctionCallItem(_Strict):
    """A call the model made in an earlier turn."""

    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str
    id: str | None = None
    status: str | None = None


class FunctionCallOutputItem(_Strict):
    """The client's result of a call, matched to it by `call_id`."""

    type: Literal["function_call_output"]
    call_id: str
    output: str | list[ContentPart]
    id: str | None = None
    status: str | None = None


class ReasoningItem(_Strict):
    """An earlier turn's reasoning: not shown to the model again (as the chat template drops
    earlier thoughts)."""

    type: Literal["reasoning"]
    id: str | None = None
    summary: list[Any] = Field(default_factory=list)
    content: list[Any] | None = None
    encrypted_content: str | None = None
    status: str | None = None


class OtherItem(_Strict):
    """Item types of OpenAI's hosted tools and item references: parsed to be refused by name."""

    model_config = ConfigDict(extra="allow")
    type: str


def _item_kind(item: Any) -> str:
    kind = item.get("type", "message") if isinstance(item, dict) else getattr(item, "type", "message")
    return kind if kind in ("message", "function_call", "function_call_output", "reasoning") else "other"


InputItem = Annotated[
    Annotated[MessageItem, Tag("message")]
    | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[FunctionCallOutputItem, Tag("function_call_output")]
    | Annotated[ReasoningItem, Tag("reasoning")]
    | Annotated[OtherItem, Tag("other")],
    Discriminator(_item_kind),
]


class FunctionTool(_Strict):
    """The Responses API's function tool (flat: no nested `function` object)."""

    type: Literal["function"]
    name: str = Field(pattern=r"^[a-zA-Z0-9_.-]{1,64}$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class HostedTool(_Strict):
    """OpenAI's hosted tools (web search, file search, code interpreter, MCP, ...): refused."""

    model_config = ConfigDict(extra="allow")
    type: str


Tool = Annotated[
    Annotated[FunctionTool, Tag("function")] | Annotated[HostedTool, Tag("hosted")],
    Discriminator(
        lambda t: "function" if (t.get("type") if isinstance(t, dict) else t.type) == "function" else "hosted"
    ),
]


class NamedFunction(_Strict):
    type: Literal["function"]
    name: str


class TextFormat(_Strict):
    """`text.format`: plain text, any JSON object, or JSON matching `schema`."""

    type: Literal["text", "json_object", "json_schema"]
    name: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    description: str | None = None
    strict: bool | None = None


class TextConfig(_Strict):
    format: TextFormat | None = None
    verbosity: str | None = None


class Reasoning(_Strict):
    """`effort` "none" turns a thinking model's thinking off, any other effort on (as the chat
    route's `reasoning_effort`); `summary` is accepted: the reasoning is returned whole."""

    effort: str | None = None
    summary: str | None = None
    generate_summary: str | None = None


class StreamOptions(_Strict):
    include_obfuscation: bool | None = None


class ResponsesRequest(SamplingExtras):
    model_config = ConfigDict(json_schema_extra={"examples": [{"input": "Hello!", "max_output_tokens": 8}]})
    model: str | None = None
    input: str | list[InputItem]
    instructions: str | None = None
    max_output_tokens: int | None = Field(None, ge=1, le=INT64_MAX)
    temperature: float | None = None
    top_p: float | None = None
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    store: bool = True
    background: bool = False
    previous_response_id: str | None = None
    tools: list[Tool] = Field(default_factory=list)
    tool_choice: Literal["none", "auto", "required"] | NamedFunction = "auto"
    parallel_tool_calls: bool = True
    max_tool_calls: int | None = Field(None, ge=1, le=INT64_MAX)
    text: TextConfig | None = None
    reasoning: Reasoning | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    include: list[str] | None = None
    truncation: Literal["auto", "disabled"] = "disabled"
    metadata: dict[str, str] | None = None
    user: str | None = None
    service_tier: str | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    # SGLang's extras, as upstream's ResponsesRequest names them.
    chat_template_kwargs: dict[str, Any] | None = None
    request_id: str | None = None
    priority: int | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    regex: str | None = None
    """SGLang's grammars, as on the chat route (at most one constraint, `text.format` included)."""
    ebnf: str | None = None
