"""POST /v1/chat/completions: OpenAI chat completions over the tokenizer manager.

`chat_plan` renders the conversation with the chat template and builds the `GenerateInput`
(pure but for the tokenizer); `chat_response` and `ChatChunker` turn outputs into a response or
stream chunks. With `--reasoning-parser` (and `separate_reasoning`, on by default) the output's
thinking goes to `reasoning_content`, the rest is the answer. With tools in play (tools given,
tool_choice not "none") the answer is parsed for tool calls in the `--tool-call-parser` format
and a choice that made any finishes with "tool_calls"; "required" or a named function
constrains the output to a call in plain JSON (`forced_call_schema`), so it always parses unless
cut short (such an output is all call: it is not searched for reasoning).
`response_format` json_object / json_schema and SGLang's regex / ebnf constrain it likewise;
at most one constraint per request.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request, Response

from sglang.runtime import parsers
from sglang.runtime.observability.tracing import trace_headers
from sglang.runtime.parsers import ReasoningParser, ToolCallStream, ToolFormat, parse_tool_calls
from sglang.runtime.parsers.reasoning import KEEPS_SPECIAL_TOKENS
from sglang.runtime.parsers.tool_formats import FORCED_FORMAT, tool_format
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
from sglang.runtime.server.openai.responses import ResponseHeader, finish_reason, matched_stop, sglext, usage
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
from sglang.runtime.server.openai.tool_calls import forced_call_schema
from sglang.runtime.server.state import ServerState, server_state

router = APIRouter()


@dataclass(frozen=True)
class ToolParsing:
    """How a chat's output is read for tool calls: calls to `names`; `forced`: the whole output
    is constrained to be calls."""

    names: frozenset[str]
    forced: bool
    fmt: ToolFormat

    def stream(self) -> ToolCallStream:
        return ToolCallStream(self.fmt, self.names)


@dataclass(frozen=True)
class ReasoningSplit:
    """How a chat's output is split into reasoning and answer: parser `name` (upstream's),
    the request's chat_template_kwargs (enable_thinking), and `stream_reasoning`."""

    name: str
    template_kwargs: dict[str, Any] | None
    stream_reasoning: bool

    def parser(self, streaming: bool) -> ReasoningParser:
        return parsers.reasoning_parser(self.name, self.template_kwargs, self.stream_reasoning or not streaming)


@dataclass(frozen=True)
class ChatPlan:
    input: GenerateInput
    n: int
    tools: ToolParsing | None
    """None: the output is all content."""
    reasoning: ReasoningSplit | None
    """None: no reasoning is separated."""
    logprobs: bool
    include_usage: bool
    names: dict[str, str]
    """The runtime's field names -> this request's, for errors (`sampling.native_names`)."""
    cached_details: bool = False
    """`return_cached_tokens_details`: the response carries `sglext.cached_tokens_details`."""


def _tool_setup(
    request: ChatCompletionRequest, parser: str | None
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
    forced = grammar is not None
    return dumped, grammar, ToolParsing(names, forced, FORCED_FORMAT if forced else tool_format(parser))


def _format_grammar(response_format: ResponseFormat | None) -> Grammar | None:
    if response_format is None or response_format.type == "text":
        return None
    if response_format.type == "json_object":
        return "json_schema", '{"type": "object"}'
    assert response_format.json_schema is not None
    return "json_schema", json.dumps(response_format.json_schema.schema_ or {"type": "object"})


def _template_kwargs(request: ChatCompletionRequest) -> dict[str, Any]:
    """chat_template_kwargs, where `reasoning_effort` sets the thinking switches the client left
    unset, as upstream does: "none" turns thinking off, any other effort on. Templates read
    `enable_thinking` (Qwen3, GLM-4.5) or `thinking` (DeepSeek-V3, Kimi K2); so do the parsers."""
    kwargs = dict(request.chat_template_kwargs or {})
    if request.reasoning_effort is not None:
        kwargs.setdefault("thinking", request.reasoning_effort != "none")
        kwargs.setdefault("enable_thinking", request.reasoning_effort != "none")
    return kwargs


def chat_plan(
    request: ChatCompletionRequest,
    tokenizer: Any,
    template: str,
    reasoning_parser: str | None = None,
    tool_call_parser: str | None = None,
) -> ChatPlan:
    """The generation for `request`, its prompt rendered with the Jinja `template`; the output
    read with the server's parsers (upstream names, None: none / the default tool format).
    Raises ApiError (400) for requests OpenAI refuses and conversations the template rejects."""
    refuse_missing(request)
    if request.top_logprobs is not None and not request.logprobs:
        raise ApiError(400, "top_logprobs needs logprobs to be true", "top_logprobs")
    if request.continue_final_message and request.messages[-1].role != "assistant":
        raise ApiError(400, "continue_final_message needs an assistant message last", "messages")
    told, tool_grammar, parsing = _tool_setup(request, tool_call_parser)
    candidates = {"response_format": _format_grammar(request.response_format), "tool_choice": tool_grammar}
    constraint = pick_grammar({**candidates, **sgl_grammars(request)})
    native = supports_tools(template)
    template_kwargs = _template_kwargs(request)
    messages = template_messages(request.messages, told, native)
    tools = told if native else None
    try:
        text = render_chat(tokenizer, template, messages, tools, request.continue_final_message, template_kwargs)
    except ChatTemplateError as e:
        raise ApiError(400, str(e), "messages") from None
    split = None
    if reasoning_parser is not None and request.separate_reasoning and not (parsing and parsing.forced):
        split = ReasoningSplit(reasoning_parser, template_kwargs, request.stream_reasoning)
    params = sampling_params(request, request.max_completion_tokens or request.max_tokens, constraint)
    if parsing is not None or (split is not None and split.name in KEEPS_SPECIAL_TOKENS):
        # The markers the parsers read (`<|python_tag|>`, `[TOOL_CALLS]`, Harmony's) may be
        # special tokens: kept in the text unless the client says otherwise, as upstream.
        params.setdefault("skip_special_tokens", False)
    obj = GenerateInput(
        input_ids=prompt_ids(tokenizer, text),
        sampling_params=params,
        return_logprob=request.logprobs,
        top_logprobs_num=request.top_logprobs or 0,
        rid=request.rid,
        priority=request.priority,
        bootstrap_host=request.bootstrap_host,
        bootstrap_port=request.bootstrap_port,
        bootstrap_room=request.bootstrap_room,
    )
    include_usage = check_stream_options(request)
    names = native_names("messages", constraint)
    return ChatPlan(
        obj, request.n, parsing, split, request.logprobs, include_usage, names, request.return_cached_tokens_details
    )


def _logprobs(plan: ChatPlan, meta: dict[str, Any], cursor: ChoiceCursor, text: TokenText) -> dict[str, Any] | None:
    if not plan.logprobs:
        return None
    pairs, tops = cursor.new_tokens(meta)
    return {"content": chat_logprobs(pairs, tops, text), "refusal": None}


def _choice(plan: ChatPlan, index: int, output: dict[str, Any], text: TokenText) -> dict[str, Any]:
    meta = output["meta_info"]
    reason = finish_reason(meta)
    answer = output["text"]
    message: dict[str, Any] = {"role": "assistant", "content": answer, "refusal": None}
    if plan.reasoning is not None:
        parser = plan.reasoning.parser(streaming=False)
        split = parser.feed(answer) + parser.finish()
        answer = split.content
        message.update(content=answer, reasoning_content=split.reasoning or None)
    if plan.tools is not None:
        parsed = parse_tool_calls(answer, plan.tools.names, plan.tools.fmt)
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
    return header.envelope("chat.completion", choices, usage=usage(metas, plan.n), **sglext(metas, plan.cached_details))


@dataclass
class _ChoiceStream:
    cursor: ChoiceCursor
    reasoning: ReasoningParser | None
    tools: ToolCallStream | None

    def delta(self, piece: str, finished: bool) -> tuple[str, str, list[dict[str, Any]]]:
        """(reasoning, content, tool-call deltas) for the next `piece` of output."""
        reasoning, content = "", piece
        if self.reasoning is not None:
            split = self.reasoning.feed(piece)
            if finished:
                split += self.reasoning.finish()
            reasoning, content = split.reasoning, split.content
        if self.tools is None:
            return reasoning, content, []
        tools = self.tools.feed(content)
        if finished:
            last = self.tools.finish()
            tools.content += last.content
            tools.calls += last.calls
        return reasoning, tools.content, tools.calls


class ChatChunker(Chunker):
    """Stream chunks: a choice's first delta carries the role, later ones its new reasoning
    (`reasoning_content`), content (held back while it may be a tool call) and tool-call deltas
    in OpenAI's shape (see `ToolCallStream`), its last one the finish reason; with
    `include_usage`, a final chunk with no choices carries the usage."""

    def __init__(self, header: ResponseHeader, plan: ChatPlan, text: TokenText) -> None:
        super().__init__(header, "chat.completion.chunk", plan.n, plan.include_usage)
        self.plan, self.text = plan, text
        self.cached_details = plan.cached_details
        self.streams: dict[int, _ChoiceStream] = {}

    def _stream(self, index: int) -> _ChoiceStream:
        if index not in self.streams:
            tools, split = self.plan.tools, self.plan.reasoning
            reasoning = None if split is None else split.parser(streaming=True)
            self.streams[index] = _ChoiceStream(ChoiceCursor(), reasoning, None if tools is None else tools.stream())
        return self.streams[index]

    def chunks(self, index: int, output: dict[str, Any]) -> list[dict[str, Any]]:
        meta, full = output["meta_info"], output["text"]
        reason = finish_reason(meta)
        stream = self._stream(index)
        delta: dict[str, Any] = {}
        if not stream.cursor.started:
            stream.cursor.started = True
            delta["role"] = "assistant"
        thought, piece, calls = stream.delta(stream.cursor.new_text(full), reason is not None)
        if thought:
            delta["reasoning_content"] = thought
        if piece or "role" in delta:
            delta["content"] = piece
        if calls:
            delta["tool_calls"] = calls
        if reason is not None and stream.tools is not None and stream.tools.called:
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


def serving_plan(state: ServerState, body: ChatCompletionRequest, adapter: str | None) -> ChatPlan:
    """`chat_plan` with this server's chat template and parsers, run on the LoRA `adapter` (what
    `ServerState.check_model` found the request's model to name). Every API that runs a chat
    (OpenAI's chat and Responses, Anthropic's Messages) plans it here."""
    try:
        template = resolve_chat_template(state.args.chat_template, state.info.chat_template)
    except ChatTemplateError as e:
        raise ApiError(400, str(e)) from None
    plan = chat_plan(body, state.tokenizer, template, state.args.reasoning_parser, state.args.tool_call_parser)
    plan.input.lora_path = adapter
    return plan


@router.post("/v1/chat/completions")
async def create_chat_completion(body: ChatCompletionRequest, request: Request) -> Response:
    state = server_state(request)
    plan = serving_plan(state, body, state.check_model(body.model))
    plan.input.trace_context = trace_headers(request.headers)
    header = ResponseHeader.new("chatcmpl", state.model_name)
    text = token_text(state.tokenizer)
    chunker = ChatChunker(header, plan, text) if body.stream else None
    build = lambda outputs: chat_response(header, plan, outputs, text)
    return await respond(state.manager, plan.input, chunker, build, plan.names)
