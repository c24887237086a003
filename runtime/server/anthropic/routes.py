"""POST /v1/messages and /v1/messages/count_tokens over the chat path.

A request is converted (`convert.chat_request`) and planned by the OpenAI chat code
(`chat_plan`: template, tools, forced calls, sampling), so its prompt is exactly the one the
OpenAI route would run; its output is then read as Anthropic content (`content.py`). Errors are
ApiErrors, which the app writes in Anthropic's shape for these paths; one that happens after a
stream began is an `error` event, and the stream ends there.
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse

from sglang.runtime.observability.tracing import trace_headers
from sglang.runtime.server.anthropic.content import EventStream, content_blocks, sse_event
from sglang.runtime.server.anthropic.convert import chat_request
from sglang.runtime.server.anthropic.protocol import Conversation, CountTokensRequest, MessagesRequest
from sglang.runtime.server.anthropic.responses import (
    anthropic_error_body,
    message,
    stop_reason,
    usage,
)
from sglang.runtime.server.openai.chat import ChatPlan, serving_plan
from sglang.runtime.server.openai.responses import json_response, run_to_end
from sglang.runtime.server.output_stream import start_stream, stream_body
from sglang.runtime.server.state import ServerState, server_state

router = APIRouter()


def _plan(state: ServerState, body: Conversation) -> ChatPlan:
    # `<base>:<adapter>` names a LoRA adapter, as on the OpenAI routes.
    adapter = state.check_model(body.model)
    return serving_plan(state, chat_request(body), adapter)


@router.post("/v1/messages")
async def create_message(body: MessagesRequest, request: Request) -> Response:
    state = server_state(request)
    plan = _plan(state, body)
    plan.input.trace_context = trace_headers(request.headers)
    names = {**plan.names, "stop": "stop_sequences"}
    stops = body.stop_sequences or []
    if body.stream:
        events = EventStream(body.model, plan.tools, stops, plan.reasoning)
        first, outputs = await start_stream(state.manager, plan.input, names)
        render = lambda output: [sse_event(event) for event in events.update(output)]
        error = lambda api: sse_event(anthropic_error_body(api.status, api.message))
        body_bytes = stream_body(first, outputs, render, error, names)
        return StreamingResponse(body_bytes, media_type="text/event-stream")
    (output,) = await run_to_end(state.manager, plan.input, names)
    meta = output["meta_info"]
    blocks, called = content_blocks(output["text"], plan.tools, plan.reasoning)
    return json_response(message(body.model, blocks, stop_reason(meta, stops, called), usage(meta)))


@router.post("/v1/messages/count_tokens")
async def count_tokens(body: CountTokensRequest, request: Request) -> Response:
    plan = _plan(server_state(request), body)
    return json_response({"input_tokens": len(plan.input.input_ids or [])})
