"""POST /v1/chat/completions: OpenAI chat completions over the tokenizer manager.

`chat_plan` renders the conversation with the chat template and builds the `GenerateInput`
(pure but for the tokenizer); `chat_response` and `ChatChunker` turn outputs into a response or
stream chunks. With tools in play (tools given, tool_choice not "none") the output is parsed for
tool calls and a choice that made any finishes with "tool_calls"; "required" or a named function
constrains the output to a call (`forced_call_schema`), so it always parses unless cut short.
`response_format` json_object / json_schema and SGLang's regex / ebnf constrain it likewise;
at most one constraint per request.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request, Response

from sglang.runtime.requests.generate_input import GenerateInput
from sglang.runtime.server.errors import ApiError
from sglang.runtime.server.openai.chat_template import (
    ChatTemplateError,
    prompt_ids,
    render_chat,
    resolve_chat_template,
    supports_tools,
)
from sglang.runtime.server.openai.logprobs import TokenText, chat_logprobs, token_text
from sglang.runtime.server.openai.messages import template_messages
from sglang.runtime.server.openai.protocol import ChatCompletionRequest, NamedToolChoice, ResponseFormat
from sglang.runtime.server.openai.responses import ResponseHeader, finish_reason, matched_stop, usage
from sglang.runtime.server.openai.sampling import (
    Grammar,
    check_stream_options,
    native_names,
    pick_grammar,
    refuse_missing,
    sampling_params,
    sgl_grammars,
)
from sglang.runtime.server.openai.streaming import ChoiceCursor, Chunker, respond
from sglang.runtime.server.openai.tool_calls import ToolCallStream, forced_call_schema, parse_tool_calls
from sglang.runtime.server.state import server_state

router = APIRouter()


@dataclass(frozen=True)
class ToolParsing:
    """How a chat's output is read for tool calls: calls to `names`; `forced`: the whole output
    is constrained to be calls."""

    names: frozenset[str]
    forced: bool


@dataclass(frozen=True)
class ChatPlan:
    input: GenerateInput
    n: int
    tools: ToolParsing | None
    """None: the output is all content."""
    logprobs: bool
    include_usage: bool
    names: dict[str, str]
    """The runtime's field names -> this request's, for errors (`sampling.native_names`)."""


def _tool_setup(
    request: ChatCompletionRequest,
) -> tuple[list[dict[str, Any]] | None, Grammar | None, ToolParsing | None]:
    """(tools the model is told about, as JSON, the grammar forcing a call, how output is parsed)."""
    choice = request.tool_choice
    if not request.tools:
        if choice not in (None, "none"):
            raise ApiError(400, "tool_choice is only allowed when tools are given", "tool_choice")
        return None, None, None
    if choice == "none":
        return None, None, None
    names = frozenset(tool.function.name for tool in request.tools)
    dumped = [tool.model_dump(exclude_none=True) for tool in request.tools]
    grammar = None
    if isinstance(choice, NamedToolChoice):
        if choice.function.name not in names:
            message = f"tool_choice names {choice.function.name!r}, which is not among the tools"
            raise ApiError(400, message, "tool_choice")
        grammar = ("json_schema", forced_call_schema(dumped, choice.function.name, parallel=False))
    elif choice == "required":
        grammar = ("json_schema", forced_call_schema(dumped, None, request.parallel_tool_calls))
    return dumped, grammar, ToolParsing(names, forced=grammar is not None)


def _format_grammar(response_format: ResponseFormat | None) -> Grammar | None:
    if response_format is None or response_format.type == "text":
        return None
    if response_format.type == "json_object":
        return "json_schema", '{"type": "object"}'
    assert response_format.json_schema is not None
    return "json_schema", json.dumps(response_format.json_schema.schema_ or {"type": "object"})


def chat_plan(request: ChatCompletionRequest, tokenizer: Any, template: str) -> ChatPlan:
    """The generation for `request`, its prompt rendered with the Jinja `template`. Raises
    ApiError (400) for requests OpenAI refuses and conversations the template rejects."""
    refuse_missing(request)
    if request.top_logprobs is not None and not request.logprobs:
        raise ApiError(400, "top_logprobs needs logprobs to be true", "top_logprobs")
    if request.continue_final_message and request.messages[-1].role != "assistant":
        raise ApiError(400, "continue_final_message needs an assistant message last", "messages")
    told, tool_grammar, parsing = _tool_setup(request)
    candidates = {"response_format": _format_grammar(request.response_format), "tool_choice": tool_grammar}
    constraint = pick_grammar({**candidates, **sgl_grammars(request)})
    native = supports_tools(template)
    messages = template_messages(request.messages, told, native)
    tools = told if native else None
    try:
        text = render_chat(
            tokenizer, template, messages, tools, request.continue_final_message, request.chat_template_kwargs
        )
    except ChatTemplateError as e:
        raise ApiError(400, str(e), "messages") from None
    max_new_tokens = request.max_completion_tokens or request.max_tokens
    obj = GenerateInput(
        input_ids=prompt_ids(tokenizer, text),
        sampling_params=sampling_params(request, max_new_tokens, constraint),
        return_logprob=request.logprobs,
        top_logprobs_num=request.top_logprobs or 0,
        rid=request.rid,
        priority=request.priority,
    )
    include_usage = check_stream_options(request)
    names = native_names("messages", constraint)
    return ChatPlan(obj, request.n, parsing, request.logprobs, include_usage, names)


def _logprobs(plan: ChatPlan, meta: dict[str, Any], cursor: ChoiceCursor, text: TokenText) -> dict[str, Any] | None:
    if not plan.logprobs:
        return None
    pairs, tops = cursor.new_tokens(meta)
    return {"content": chat_logprobs(pairs, tops, text), "refusal": None}


def _choice(plan: ChatPlan, index: int, output: dict[str, Any], text: TokenText) -> dict[str, Any]:
    meta = output["meta_info"]
    reason = finish_reason(meta)
    message: dict[str, Any] = {"role": "assistant", "content": output["text"], "refusal": None}
    if plan.tools is not None:
        parsed = parse_tool_calls(output["text"], plan.tools.names)
        if parsed.calls:
            message.update(content=parsed.content.strip() or None, tool_calls=parsed.calls)
            reason = "tool_calls"
    return {
        "index": index,
        "message": message,
        "logprobs": _logprobs(plan, meta, ChoiceCursor(), text),
        "finish_reason": reason,
        "matched_stop": matched_stop(meta),
    }


def chat_response(
    header: ResponseHeader, plan: ChatPlan, outputs: list[dict[str, Any]], text: TokenText
) -> dict[str, Any]:
    choices = [_choice(plan, i, out, text) for i, out in enumerate(outputs)]
    metas = [out["meta_info"] for out in outputs]
    return header.envelope("chat.completion", choices, usage=usage(metas, plan.n))


@dataclass
class _ChoiceStream:
    cursor: ChoiceCursor
    tools: ToolCallStream | None


class ChatChunker(Chunker):
    """Stream chunks: a choice's first delta carries the role, later ones its new content (held
    back while it may be a tool call, see `ToolCallStream`), its last one the finish reason and
    any tool calls, each complete in one delta; with `include_usage`, a final chunk with no
    choices carries the usage."""

    def __init__(self, header: ResponseHeader, plan: ChatPlan, text: TokenText) -> None:
        super().__init__(header, "chat.completion.chunk", plan.n, plan.include_usage)
        self.plan, self.text = plan, text
        self.streams: dict[int, _ChoiceStream] = {}

    def _stream(self, index: int) -> _ChoiceStream:
        if index not in self.streams:
            tools = self.plan.tools
            parser = None if tools is None else ToolCallStream(tools.names, tools.forced)
            self.streams[index] = _ChoiceStream(ChoiceCursor(), parser)
        return self.streams[index]

    def chunks(self, index: int, output: dict[str, Any]) -> list[dict[str, Any]]:
        meta, full = output["meta_info"], output["text"]
        reason = finish_reason(meta)
        stream = self._stream(index)
        delta: dict[str, Any] = {}
        if not stream.cursor.started:
            stream.cursor.started = True
            delta["role"] = "assistant"
        calls: list[dict[str, Any]] = []
        if stream.tools is None:
            piece = stream.cursor.new_text(full)
        elif reason is None:
            piece = stream.tools.content_delta(full)
        else:
            piece, calls = stream.tools.finish(full)
        if piece or "role" in delta:
            delta["content"] = piece
        if calls:
            delta["tool_calls"] = [{"index": k, **call} for k, call in enumerate(calls)]
            reason = "tool_calls"
        logprobs = _logprobs(self.plan, meta, stream.cursor, self.text)
        if reason is not None:
            self.finished(index, meta)
        elif not delta and not (logprobs and logprobs["content"]):
            return []
        choice = {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": reason}
        if reason is not None:
            choice["matched_stop"] = matched_stop(meta)
        return [self.chunk([choice])]


@router.post("/v1/chat/completions")
async def create_chat_completion(body: ChatCompletionRequest, request: Request) -> Response:
    state = server_state(request)
    adapter = state.check_model(body.model)
    try:
        template = resolve_chat_template(state.args.chat_template, state.info.chat_template)
    except ChatTemplateError as e:
        raise ApiError(400, str(e)) from None
    plan = chat_plan(body, state.tokenizer, template)
    plan.input.lora_path = adapter
    header = ResponseHeader.new("chatcmpl", state.model_name)
    text = token_text(state.tokenizer)
    chunker = ChatChunker(header, plan, text) if body.stream else None
    build = lambda outputs: chat_response(header, plan, outputs, text)
    return await respond(state.manager, plan.input, chunker, build, plan.names)
