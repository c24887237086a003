"""OpenAI's Responses API: POST /v1/responses (streaming and background included), and with
`--enable-response-store` GET and DELETE /v1/responses/{id} and POST /v1/responses/{id}/cancel.

A request is converted (`convert.chat_request`, after the stored conversation its
`previous_response_id` names) and planned by the OpenAI chat code (`chat_plan`), so its prompt
is exactly the one the chat route would run on the same conversation; its output is then read
as response items (`output.py`, `events.py`). The response id is the request's id in the
engine (the client's `request_id`, or a new `resp_...`). A background request runs as a task
of the HTTP process and is stored `queued`, then `in_progress`, then as it ends (`completed`,
`incomplete`, `failed` with the error, or `cancelled`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse

from sglang.runtime.observability.tracing import trace_headers
from sglang.runtime.server.errors import ApiError, as_api_error
from sglang.runtime.server.openai.chat import ChatPlan, serving_plan
from sglang.runtime.server.openai.logprobs import chat_logprobs, token_text
from sglang.runtime.server.openai.responses import json_response, run_to_end
from sglang.runtime.server.openai.streaming import ChoiceCursor
from sglang.runtime.server.output_split import split_output
from sglang.runtime.server.output_stream import start_stream, stream_body
from sglang.runtime.server.responses_api.convert import chat_request
from sglang.runtime.server.responses_api.events import EventStream, sse_event
from sglang.runtime.server.responses_api.output import (
    ResponseShell,
    assistant_message,
    new_id,
    output_items,
    status_of,
    usage,
)
from sglang.runtime.server.responses_api.protocol import ResponsesRequest
from sglang.runtime.server.responses_api.store import ResponseStore, StoredResponse
from sglang.runtime.server.state import ServerState, server_state

logger = logging.getLogger(__name__)

router = APIRouter()

RUNNING = ("queued", "in_progress")


def response_store(state: ServerState) -> ResponseStore:
    if "responses" not in state.extras:
        state.extras["responses"] = ResponseStore(state.args.enable_response_store)
    return state.extras["responses"]


def _plan(state: ServerState, body: ResponsesRequest, history: list[dict[str, Any]]) -> tuple[ChatPlan, list[Any]]:
    adapter = state.check_model(body.model)
    chat, turn = chat_request(body, history)
    return serving_plan(state, chat, adapter), turn


def _history(store: ResponseStore, body: ResponsesRequest) -> list[dict[str, Any]]:
    if body.previous_response_id is None:
        return []
    previous = store.get(body.previous_response_id, "previous_response_id")
    if previous.response["status"] in RUNNING:
        message = f"response {body.previous_response_id!r} is still {previous.response['status']}"
        raise ApiError(400, message, "previous_response_id")
    return previous.conversation


def _check_background(store: ResponseStore, body: ResponsesRequest) -> None:
    if not body.background:
        return
    store.require("background responses", "background")
    if not body.store:
        raise ApiError(400, "a background response must be stored: it needs store: true", "store")
    if body.stream:
        raise ApiError(400, "this server does not stream background responses: poll GET /v1/responses/{id}", "stream")


class _Finisher:
    """Builds a non-streamed response object from the final output; `conversation` then ends with
    its answer (what a stored response keeps for the next turn)."""

    def __init__(self, state: ServerState, shell: ResponseShell, plan: ChatPlan, conversation: list[Any]) -> None:
        self.state, self.shell, self.plan, self.conversation = state, shell, plan, conversation

    def count_tokens(self, text: str) -> int:
        return len(self.state.tokenizer.encode(text, add_special_tokens=False))

    def logprob_stream(self) -> Callable[[dict[str, Any]], list[Any]] | None:
        """What a stream's text deltas take their logprob entries from (None: not asked for)."""
        if not self.plan.logprobs:
            return None
        cursor, text = ChoiceCursor(), token_text(self.state.tokenizer)
        return lambda meta: chat_logprobs(*cursor.new_tokens(meta), text)

    def response(self, output: dict[str, Any]) -> dict[str, Any]:
        meta = output["meta_info"]
        status = status_of(meta)
        turn = split_output(output["text"], self.plan.tools, self.plan.reasoning)
        logprobs = None
        if self.plan.logprobs:
            pairs, tops = meta.get("output_token_logprobs") or [], meta.get("output_top_logprobs") or []
            logprobs = chat_logprobs(pairs, tops, token_text(self.state.tokenizer))
        reasoning_tokens = self.count_tokens(turn.reasoning) if turn.reasoning else 0
        self.conversation = [*self.conversation, assistant_message(turn)]
        return self.shell.object(status, output_items(turn, status, logprobs), usage(meta, reasoning_tokens))


@router.post("/v1/responses")
async def create_response(body: ResponsesRequest, request: Request) -> Response:
    state = server_state(request)
    store = response_store(state)
    _check_background(store, body)
    history = _history(store, body)
    plan, turn = _plan(state, body, history)
    response_id = body.request_id or new_id("resp")
    plan.input.rid = response_id
    plan.input.trace_context = trace_headers(request.headers)
    shell = ResponseShell(response_id, state.model_name, body)
    finisher = _Finisher(state, shell, plan, [*history, *turn])
    keep = store.enabled and body.store
    if body.background:
        return json_response(_start_background(state, store, shell, plan, finisher))
    if body.stream:
        events = EventStream(shell, plan.tools, plan.reasoning, finisher.count_tokens, finisher.logprob_stream())
        first, outputs = await start_stream(state.manager, plan.input, plan.names)

        def render(output: dict[str, Any]) -> list[bytes]:
            pieces = [sse_event(event) for event in events.update(output)]
            if events.final is not None and keep:
                conversation = [*finisher.conversation, assistant_message(events.turn)]
                store.put(response_id, StoredResponse(events.final, conversation))
            return pieces

        error = lambda api: sse_event(events.error(api.status, api.message, api.param))
        body_bytes = stream_body(first, outputs, render, error, plan.names)
        return StreamingResponse(body_bytes, media_type="text/event-stream")
    (output,) = await run_to_end(state.manager, plan.input, plan.names)
    response = finisher.response(output)
    if keep:
        store.put(response_id, StoredResponse(response, finisher.conversation))
    return json_response(response)


def _start_background(
    state: ServerState, store: ResponseStore, shell: ResponseShell, plan: ChatPlan, finisher: _Finisher
) -> dict[str, Any]:
    entry = StoredResponse(shell.object("queued", []), finisher.conversation)
    store.put(shell.id, entry)

    async def run() -> None:
        try:
            entry.response = shell.object("in_progress", [])
            (output,) = await run_to_end(state.manager, plan.input, plan.names)
            entry.response = finisher.response(output)
            entry.conversation = finisher.conversation
        except asyncio.CancelledError:
            entry.response = shell.object("cancelled", [])
        except Exception as e:
            api = as_api_error(e)
            if api is None:
                logger.exception("background response %s failed", shell.id)
                api = ApiError(500, f"internal error: {type(e).__name__}")
            entry.response = shell.object("failed", [], error={"code": str(api.status), "message": api.message})
        finally:
            entry.task = None

    entry.task = asyncio.get_running_loop().create_task(run())
    return entry.response


@router.get("/v1/responses/{response_id}")
async def retrieve_response(response_id: str, request: Request) -> Response:
    return json_response(response_store(server_state(request)).get(response_id).response)


@router.delete("/v1/responses/{response_id}")
async def delete_response(response_id: str, request: Request) -> Response:
    store = response_store(server_state(request))
    entry = store.get(response_id)
    if entry.task is not None:
        entry.task.cancel()
    store.delete(response_id)
    return json_response({"id": response_id, "object": "response", "deleted": True})


@router.post("/v1/responses/{response_id}/cancel")
async def cancel_response(response_id: str, request: Request) -> Response:
    entry = response_store(server_state(request)).get(response_id)
    if not entry.response["background"]:
        raise ApiError(400, "only background responses can be cancelled", "response_id")
    task = entry.task
    if task is not None:  # else it already ended: cancelling again changes nothing, as upstream
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        entry.task = None
        if entry.response["status"] in RUNNING:  # cancelled before it began to run
            entry.response = {**entry.response, "status": "cancelled"}
    return json_response(entry.response)
