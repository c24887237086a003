"""POST /v1/completions: OpenAI text completions over the tokenizer manager.

`completion_plan` turns a request into a `GenerateInput` (pure); `completion_response` and
`CompletionChunker` turn the manager's outputs into a response or stream chunks (pure). Choice
`i` completes prompt `i // n`. Under `echo` a choice's text starts with its prompt, and its
logprobs with the prompt's tokens (the first one unscored), `text_offset` counting from 0.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request, Response

from sglang.runtime.observability.tracing import trace_headers
from sglang.runtime.requests.generate_input import GenerateInput
from sglang.runtime.server.errors import ApiError
from sglang.runtime.server.openai.logprobs import TokenText, completion_logprobs, token_text
from sglang.runtime.server.openai.protocol import CompletionRequest
from sglang.runtime.server.openai.responses import ResponseHeader, finish_reason, matched_stop, sglext, usage
from sglang.runtime.server.openai.sampling import (
    check_stream_options,
    native_names,
    pick_grammar,
    refuse_missing,
    sampling_params,
    sgl_grammars,
)
from sglang.runtime.server.openai.streaming import ChoiceCursor, Chunker, respond
from sglang.runtime.server.state import server_state

router = APIRouter()


@dataclass(frozen=True)
class CompletionPlan:
    input: GenerateInput
    n: int
    echo_texts: list[str] | None
    """Per prompt, the text `echo` puts before its completions; None without echo."""
    logprobs: bool
    include_usage: bool
    names: dict[str, str]
    """The runtime's field names -> this request's, for errors (`sampling.native_names`)."""
    cached_details: bool = False
    """`return_cached_tokens_details`: the response carries `sglext.cached_tokens_details`."""

    def echo_text(self, index: int) -> str:
        return "" if self.echo_texts is None else self.echo_texts[index // self.n]


def completion_plan(request: CompletionRequest, detokenize: Callable[[list[int]], str]) -> CompletionPlan:
    """`detokenize` gives token-id prompts their text for `echo`. Raises ApiError for input
    that OpenAI refuses or this server does not support."""
    refuse_missing(request)
    if request.best_of is not None and request.best_of != request.n:
        raise ApiError(400, "best_of is not supported (other than equal to n)", "best_of")
    if request.suffix is not None:
        raise ApiError(400, "suffix is not supported", "suffix")
    prompt = request.prompt
    if isinstance(prompt, list) and not prompt:
        raise ApiError(400, "the prompt is empty", "prompt")
    texts = isinstance(prompt, str) or isinstance(prompt[0], str)
    prompts: list[Any] = [prompt] if isinstance(prompt, str) or isinstance(prompt[0], int) else list(prompt)
    json_schema = None if request.json_schema is None else ("json_schema", request.json_schema)
    constraint = pick_grammar({"json_schema": json_schema, **sgl_grammars(request)})
    wants_logprobs = request.logprobs is not None
    obj = GenerateInput(
        text=prompt if texts else None,
        input_ids=None if texts else prompt,
        sampling_params=sampling_params(request, request.max_tokens, constraint),
        return_logprob=wants_logprobs,
        # Prompt logprobs only under echo: they are shown only with the prompt's text.
        logprob_start_len=0 if request.echo and wants_logprobs else -1,
        top_logprobs_num=request.logprobs or 0,
        rid=request.rid,
        priority=request.priority,
        bootstrap_host=request.bootstrap_host,
        bootstrap_port=request.bootstrap_port,
        bootstrap_room=request.bootstrap_room,
    )
    echo_texts = [p if isinstance(p, str) else detokenize(p) for p in prompts] if request.echo else None
    include_usage = check_stream_options(request)
    names = native_names("prompt", constraint)
    return CompletionPlan(
        obj, request.n, echo_texts, wants_logprobs, include_usage, names, request.return_cached_tokens_details
    )


def _padded(tops: Sequence[Any], count: int) -> list[Any]:
    # The manager lists no top rows when none were asked for; an empty row per token then.
    return list(tops) + [()] * (count - len(tops))


def _logprobs(
    plan: CompletionPlan, meta: dict[str, Any], cursor: ChoiceCursor, first: bool, text: TokenText
) -> dict[str, Any] | None:
    """The logprobs of the tokens this chunk carries: under echo the prompt's on the first."""
    if not plan.logprobs:
        return None
    pairs, tops = cursor.new_tokens(meta)
    tops = _padded(tops, len(pairs))
    if first and plan.echo_texts is not None:
        prompt_pairs = meta.get("input_token_logprobs") or []
        pairs = list(prompt_pairs) + pairs
        tops = _padded(meta.get("input_top_logprobs") or [], len(prompt_pairs)) + tops
    body, cursor.offset = completion_logprobs(pairs, tops, text, cursor.offset)
    return body


def _choice(
    plan: CompletionPlan, index: int, output: dict[str, Any], cursor: ChoiceCursor, text: TokenText
) -> dict[str, Any]:
    meta = output["meta_info"]
    first = not cursor.started
    cursor.started = True
    piece = cursor.new_text(output["text"])
    return {
        "index": index,
        "text": plan.echo_text(index) + piece if first else piece,
        "logprobs": _logprobs(plan, meta, cursor, first, text),
        "finish_reason": finish_reason(meta),
        "matched_stop": matched_stop(meta),
    }


def completion_response(
    header: ResponseHeader, plan: CompletionPlan, outputs: list[dict[str, Any]], text: TokenText
) -> dict[str, Any]:
    choices = [_choice(plan, i, out, ChoiceCursor(), text) for i, out in enumerate(outputs)]
    metas = [out["meta_info"] for out in outputs]
    return header.envelope("text_completion", choices, usage=usage(metas, plan.n), **sglext(metas, plan.cached_details))


class CompletionChunker(Chunker):
    """Stream chunks: each carries one choice's new text (and logprobs), its last one the
    finish reason."""

    def __init__(self, header: ResponseHeader, plan: CompletionPlan, text: TokenText) -> None:
        super().__init__(header, "text_completion", plan.n, plan.include_usage)
        self.plan, self.text = plan, text
        self.cached_details = plan.cached_details
        self.cursors: dict[int, ChoiceCursor] = {}

    def chunks(self, index: int, output: dict[str, Any]) -> list[dict[str, Any]]:
        choice = _choice(self.plan, index, output, self.cursors.setdefault(index, ChoiceCursor()), self.text)
        if choice["finish_reason"] is not None:
            self.finished(index, output["meta_info"])
        elif not choice["text"] and not choice["logprobs"]:
            return []
        return [self.chunk([choice])]


@router.post("/v1/completions")
async def create_completion(body: CompletionRequest, request: Request) -> Response:
    state = server_state(request)
    adapter = state.check_model(body.model)
    plan = completion_plan(body, lambda ids: state.decode_ids(ids, "prompt"))
    plan.input.lora_path = adapter
    plan.input.trace_context = trace_headers(request.headers)
    header = ResponseHeader.new("cmpl", state.model_name)
    text = token_text(state.tokenizer)
    chunker = CompletionChunker(header, plan, text) if body.stream else None
    build = lambda outputs: completion_response(header, plan, outputs, text)
    return await respond(state.manager, plan.input, chunker, build, plan.names)
