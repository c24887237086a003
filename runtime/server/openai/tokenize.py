"""POST /v1/tokenize and /v1/detokenize (and their unprefixed aliases), in upstream SGLang's shapes.

Tokenize: `prompt` (a string or a list of them) or `messages` (rendered with the chat template
exactly as /v1/chat/completions renders them, `tools` included); exactly one of the two. The
answer is `{"tokens", "count", "max_model_len"}`: per prompt when `prompt` is a list. A prompt
longer than the context is counted, not refused: checking a length is what clients call it for.
Detokenize: `tokens` (ids, or a list of id lists) back to `{"text"}`, a string or a list.

Unknown fields are refused, as on the other OpenAI routes (upstream forwards them to its chat
request). Tokenizing runs on a worker thread: a body near the size limit takes seconds to
tokenize, and the event loop serves other requests meanwhile.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request, Response
from pydantic import Field, StrictBool, StrictInt, StrictStr, model_validator

from sglang.runtime.server.errors import ApiError
from sglang.runtime.server.openai.chat import chat_plan
from sglang.runtime.server.openai.chat_template import ChatTemplateError, resolve_chat_template
from sglang.runtime.server.openai.protocol import ChatCompletionRequest, ChatMessage, Tool, ToolChoice, UnicodeBody
from sglang.runtime.server.openai.responses import json_response
from sglang.runtime.server.state import ServerState, server_state

router = APIRouter()

TokenIds = list[StrictInt]


class TokenizeRequest(UnicodeBody):
    model: str | None = None
    prompt: StrictStr | list[StrictStr] | None = None
    messages: list[ChatMessage] | None = Field(None, min_length=1)
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    reasoning_effort: str | None = None
    continue_final_message: StrictBool = False
    chat_template_kwargs: dict[str, Any] | None = None
    add_special_tokens: StrictBool = True
    """Whether the tokenizer adds the model's special tokens (BOS, ...) to a `prompt`."""

    @model_validator(mode="after")
    def _one_input(self) -> TokenizeRequest:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("give exactly one of prompt and messages")
        return self


class DetokenizeRequest(UnicodeBody):
    model: str | None = None
    tokens: TokenIds | list[TokenIds]
    skip_special_tokens: StrictBool = True


def _chat_ids(body: TokenizeRequest, state: ServerState) -> list[int]:
    """The prompt /v1/chat/completions would send for these messages."""
    try:
        template = resolve_chat_template(state.args.chat_template, state.info.chat_template)
    except ChatTemplateError as e:
        raise ApiError(400, str(e)) from None
    chat_fields = body.model_dump(exclude={"prompt", "add_special_tokens"}, exclude_none=True)
    chat = ChatCompletionRequest.model_validate({**chat_fields, "messages": body.messages, "max_tokens": 1})
    ids = chat_plan(chat, state.tokenizer, template).input.input_ids
    assert isinstance(ids, list)
    return ids


def tokenize(body: TokenizeRequest, state: ServerState) -> dict[str, Any]:
    if body.messages is not None:
        tokens: Any = _chat_ids(body, state)
        count: Any = len(tokens)
    elif isinstance(body.prompt, str):
        tokens = state.tokenizer.encode(body.prompt, add_special_tokens=body.add_special_tokens)
        count = len(tokens)
    else:
        tokens = [state.tokenizer.encode(p, add_special_tokens=body.add_special_tokens) for p in body.prompt or []]
        count = [len(ids) for ids in tokens]
    return {"tokens": tokens, "count": count, "max_model_len": state.info.context_length}


def detokenize(body: DetokenizeRequest, state: ServerState) -> dict[str, Any]:
    """Raises ApiError (400) for an id outside the vocabulary, naming it."""
    batch = bool(body.tokens) and isinstance(body.tokens[0], list)
    lists: list[list[int]] = body.tokens if batch else [body.tokens]  # type: ignore[assignment,list-item]
    texts = [state.decode_ids(ids, "tokens", skip_special_tokens=body.skip_special_tokens) for ids in lists]
    return {"text": texts if batch else texts[0]}


@router.post("/v1/tokenize")
@router.post("/tokenize", include_in_schema=False)
async def create_tokenize(body: TokenizeRequest, request: Request) -> Response:
    state = server_state(request)
    state.check_model(body.model)
    return json_response(await asyncio.to_thread(tokenize, body, state))


@router.post("/v1/detokenize")
@router.post("/detokenize", include_in_schema=False)
async def create_detokenize(body: DetokenizeRequest, request: Request) -> Response:
    state = server_state(request)
    state.check_model(body.model)
    return json_response(await asyncio.to_thread(detokenize, body, state))
