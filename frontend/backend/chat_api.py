"""What the chat-only API backends (`Anthropic`, `LiteLLM`) share: the messages of a call and
the parameters their APIs cannot carry.

These APIs take a conversation and answer with the assistant's next message, so a `gen` must
open the assistant turn, as on `OpenAI` chat models. (Upstream SGLang's backends send a program
without roles as one user message of its text; that answers the text instead of continuing it,
so here it is a BackendCapabilityError, as everywhere else in this frontend.) A parameter an API
has no field for, set by the program to anything but the default, is a BackendCapabilityError
naming it, never silently dropped.
"""

from __future__ import annotations

from typing import Any

from sglang.frontend.backend.base import Prompt
from sglang.frontend.errors import BackendCapabilityError
from sglang.frontend.sampling_params import SamplingParams

DEFAULTS = SamplingParams()


def chat_messages(prompt: Prompt, api: str) -> list[dict[str, Any]]:
    """The messages to send for a `gen` at `prompt` (copies: the caller may change them)."""
    if not prompt.messages or prompt.role != "assistant" or prompt.role_text.strip():
        raise BackendCapabilityError(
            f"{api} is a chat API: sgl.gen must start the assistant message "
            "(right after sgl.assistant_begin() or inside `with s.assistant():`)"
        )
    return [dict(message) for message in prompt.messages]


def refuse_unsendable(params: SamplingParams, names: tuple[str, ...], api: str) -> None:
    """BackendCapabilityError if `params` set any of `names` (or a constraint: regex, dtype,
    json_schema, which no chat API here carries)."""
    refused = [name for name in names if getattr(params, name) != getattr(DEFAULTS, name)]
    if params.constrained_regex() is not None or params.json_schema is not None:
        refused.append("regex/dtype/json_schema")
    if refused:
        raise BackendCapabilityError(f"the {api} API cannot carry {', '.join(refused)}")


def set_fields(params: SamplingParams, names: dict[str, str]) -> dict[str, Any]:
    """The request fields (`names`: parameter -> field) of parameters set to other than the
    default."""
    return {
        field: getattr(params, name)
        for name, field in names.items()
        if getattr(params, name) != getattr(DEFAULTS, name)
    }
