"""Ollama request bodies (POST /api/chat, /api/generate, /api/show), as pydantic models.

Every field the official `ollama` Python client sends is declared, so a client request always
parses; a field whose feature this server lacks (images, logprobs, image generation, `suffix`,
`context`, `template`) is refused by `convert.py` with a 400 that names it. Other unknown fields
are rejected. `stream` defaults to true, as in Ollama.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FunctionCall(_Strict):
    name: str
    arguments: dict[str, Any]
    index: int | None = None


class ToolCall(_Strict):
    function: FunctionCall
    id: str | None = None
    type: Literal["function"] | None = None


class Message(_Strict):
    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = None
    thinking: str | None = None
    images: list[str] | None = None
    tool_calls: list[ToolCall] | None = None
    tool_name: str | None = None
    tool_call_id: str | None = None


Format = Literal["", "json"] | dict[str, Any]
"""`json`: any JSON object; a JSON schema: output matching it; empty: free text."""


class _Generation(_Strict):
    """What both generation endpoints share."""

    model: str = Field(min_length=1)
    stream: bool = True
    format: Format | None = None
    options: dict[str, Any] | None = None
    keep_alive: float | str | None = None
    """Accepted: the one model stays loaded."""
    think: bool | Literal["low", "medium", "high"] | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None


class ChatRequest(_Generation):
    messages: list[Message] = Field(default_factory=list)
    tools: list[dict[str, Any]] | None = None


class GenerateRequest(_Generation):
    prompt: str | None = None
    suffix: str | None = None
    system: str | None = None
    template: str | None = None
    context: list[int] | None = None
    raw: bool | None = None
    images: list[str] | None = None
    width: int | None = None
    height: int | None = None
    steps: int | None = None


class ShowRequest(_Strict):
    model: str | None = None
    name: str | None = None
    """The older name of `model`."""
    verbose: bool | None = None
