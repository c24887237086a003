"""Anthropic Messages request bodies (POST /v1/messages, /v1/messages/count_tokens), as pydantic
models.

Field names follow Anthropic's API (and upstream SGLang's adapter). Unknown fields are rejected
(FastAPI answers 400 in Anthropic's error shape), as Anthropic does; `cache_control` and
`citations` on blocks and the request fields that address Anthropic's service (`metadata`,
`service_tier`, `speed`, `inference_geo`, ...) are accepted and change nothing for a
self-hosted model. Anthropic's newer clients send no sampling fields; `temperature`, `top_p` and
`top_k` still work (as `extra_body` there). Image and document blocks parse, so that the refusal can say
why (`convert.py`: this server serves a text-only model) instead of a schema error.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Block(_Strict):
    cache_control: dict[str, Any] | None = None


class TextBlock(_Block):
    type: Literal["text"]
    text: str
    citations: list[dict[str, Any]] | None = None


class ImageBlock(_Block):
    type: Literal["image", "document"]
    source: dict[str, Any]
    title: str | None = None
    context: str | None = None
    citations: dict[str, Any] | None = None


class ToolUseBlock(_Block):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]


class ToolResultBlock(_Block):
    type: Literal["tool_result"]
    tool_use_id: str
    content: str | list[Annotated[TextBlock | ImageBlock, Field(discriminator="type")]] | None = None
    is_error: bool | None = None


class ThinkingBlock(_Block):
    """An earlier turn's thinking, as clients send it back; not shown to the model again (as
    Anthropic strips earlier turns' thinking)."""

    type: Literal["thinking", "redacted_thinking"]
    thinking: str | None = None
    signature: str | None = None
    data: str | None = None


ContentBlock = Annotated[
    TextBlock | ImageBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock, Field(discriminator="type")
]


class Message(_Strict):
    role: Literal["user", "assistant"]
    content: str | list[ContentBlock]


class Tool(_Strict):
    name: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")
    description: str | None = None
    input_schema: dict[str, Any]
    type: Literal["custom"] | None = None
    cache_control: dict[str, Any] | None = None


class ToolChoice(_Strict):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class ThinkingParam(_Strict):
    type: Literal["enabled", "disabled"]
    budget_tokens: int | None = None


class OutputFormat(_Strict):
    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")


class OutputConfig(_Strict):
    format: OutputFormat | None = None
    effort: str | None = None
    """Accepted; this server sets no reasoning budget."""


class Conversation(_Strict):
    """What both endpoints read: the model, the system prompt, the turns and the tools."""

    model: str = Field(min_length=1)
    messages: list[Message] = Field(min_length=1)
    system: str | list[TextBlock] | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    thinking: ThinkingParam | None = None


class MessagesRequest(Conversation):
    max_tokens: int = Field(ge=1)
    stop_sequences: list[str] | None = None
    stream: bool = False
    temperature: float | None = Field(None, ge=0.0)
    top_p: float | None = None
    top_k: int | None = None
    output_config: OutputConfig | None = None
    # Accepted for compatibility; they have no meaning for a self-hosted model.
    metadata: dict[str, Any] | None = None
    service_tier: str | None = None
    cache_control: dict[str, Any] | None = None
    speed: str | None = None
    inference_geo: str | None = None
    diagnostics: dict[str, Any] | None = None
    user_profile_id: str | None = None
    workspace_id: str | None = None


class CountTokensRequest(Conversation):
    pass
