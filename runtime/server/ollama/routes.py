"""Ollama's API: GET/HEAD /, GET /api/version, GET /api/tags, GET /api/ps, POST /api/show,
/api/chat and /api/generate, over the OpenAI routes' planning code (see `convert.py`); POST
/api/embed and /api/embeddings are refused with the reason, as `/v1/embeddings` is.

The one served model is listed under the server's model name; a request may name it with
Ollama's default tag (`NAME:latest`). A chat with no messages or a generate with no prompt is
Ollama's "load the model" call: it answers done at once, generating nothing. Bodies are JSON
whatever their Content-Type says, as in Ollama (whose examples post with a bare `curl -d`).
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any, TypeVar

import orjson
from fastapi import APIRouter, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import PlainTextResponse, StreamingResponse
from pydantic import BaseModel, ValidationError

from sglang.runtime.observability.tracing import trace_headers
from sglang.runtime.server.embedding_api import REASON as NO_EMBEDDINGS
from sglang.runtime.server.errors import ApiError
from sglang.runtime.server.ollama.convert import chat_request, generate_request
from sglang.runtime.server.ollama.protocol import ChatRequest, GenerateRequest, ShowRequest
from sglang.runtime.server.ollama.responses import (
    ChunkStream,
    assistant_message,
    done_fields,
    ollama_error_body,
    split_thinking,
    timestamp,
)
from sglang.runtime.server.openai.chat import ReasoningSplit, ToolParsing, chat_plan
from sglang.runtime.server.openai.chat_template import ChatTemplateError, resolve_chat_template
from sglang.runtime.server.openai.completions import completion_plan
from sglang.runtime.server.openai.protocol import ChatCompletionRequest
from sglang.runtime.server.openai.responses import json_response, run_to_end
from sglang.runtime.server.output_stream import start_stream, stream_body
from sglang.runtime.server.state import ServerState, server_state

router = APIRouter()
Body = TypeVar("Body", bound=BaseModel)

OLLAMA_VERSION = "0.12.6"
"""What /api/version reports: the Ollama release whose API these routes follow (clients compare
it with their own and warn about an older server)."""
DIGEST = "sha256:" + "0" * 64
"""Ollama names a model's weights by their digest; this server has no such file, so a fixed one."""
KEPT_LOADED = timedelta(microseconds=(2**63 - 1) // 1000)
"""How long /api/ps says the model stays loaded: it is never unloaded, which Ollama reports
(`keep_alive: -1`) as an expiry its longest duration away (Go's largest `time.Duration`)."""


def _inlined(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        if "$ref" in node:
            return _inlined(defs[node["$ref"].rsplit("/", 1)[-1]], defs)
        return {key: _inlined(value, defs) for key, value in node.items()}
    if isinstance(node, list):
        return [_inlined(value, defs) for value in node]
    return node


def _documented(model: type[BaseModel]) -> dict[str, Any]:
    """The route's request body in the OpenAPI document (the handler parses it itself). Its
    definitions are inlined: a `$ref` in the document resolves against the document's root."""
    schema = model.model_json_schema()
    inlined = _inlined(schema, schema.pop("$defs", {}))
    return {"requestBody": {"content": {"application/json": {"schema": inlined}}, "required": True}}


async def _parsed(request: Request, model: type[Body]) -> Body:
    try:
        return model.model_validate_json(await request.body())
    except ValidationError as e:
        raise RequestValidationError(e.errors(include_url=False)) from None


def _check_model(state: ServerState, model: str | None) -> str | None:
    """The LoRA adapter a `<base>:<adapter>` model names, else None (`:latest` is Ollama's tag)."""
    return state.check_model(model.removesuffix(":latest") if model else model)


def _details(state: ServerState) -> dict[str, Any]:
    family = state.info.model_path.rstrip("/").rsplit("/", 1)[-1]
    return {
        "parent_model": "",
        "format": "sglang",
        "family": family,
        "families": [family],
        "parameter_size": "",
        "quantization_level": "",
    }


@router.get("/")
async def root() -> Response:
    return PlainTextResponse("Ollama is running")


@router.head("/")
async def root_probe() -> Response:
    """The Ollama CLI's liveness probe."""
    return Response()


@router.get("/api/version")
async def version() -> Response:
    return json_response({"version": OLLAMA_VERSION})


def _listed(state: ServerState) -> dict[str, Any]:
    """The served model as /api/tags and /api/ps list it."""
    name = state.model_name
    return {"name": name, "model": name, "size": 0, "digest": DIGEST, "details": _details(state)}


@router.get("/api/tags")
async def tags(request: Request) -> Response:
    return json_response({"models": [{**_listed(server_state(request)), "modified_at": timestamp()}]})


@router.get("/api/ps")
async def running(request: Request) -> Response:
    """The running models: the served one, loaded for the server's lifetime (no VRAM figure)."""
    state = server_state(request)
    loaded = {"expires_at": timestamp(KEPT_LOADED), "size_vram": 0, "context_length": state.info.context_length}
    return json_response({"models": [{**_listed(state), **loaded}]})


@router.post("/api/embed")
@router.post("/api/embeddings")
async def embed() -> None:
    raise ApiError(400, NO_EMBEDDINGS, "model")


@router.post("/api/show", openapi_extra=_documented(ShowRequest))
async def show(request: Request) -> Response:
    body = await _parsed(request, ShowRequest)
    state = server_state(request)
    model = body.model or body.name
    if not model:
        raise ApiError(400, "model is required", "model")
    _check_model(state, model)
    details = _details(state)
    family, context = details["family"], state.info.context_length
    template = state.args.chat_template or state.info.chat_template or ""
    return json_response(
        {
            "license": "",
            "modelfile": f"FROM {state.info.model_path}\nPARAMETER num_ctx {context}\n",
            "parameters": f"num_ctx {context}",
            "template": template,
            "details": details,
            "model_info": {"general.architecture": family, f"{family}.context_length": context},
            "capabilities": ["completion", "tools"],
            "modified_at": timestamp(),
        }
    )


def _template(state: ServerState) -> str:
    try:
        return resolve_chat_template(state.args.chat_template, state.info.chat_template)
    except ChatTemplateError as e:
        raise ApiError(400, str(e)) from None


def _loaded(model: str, chat: bool, stream: bool) -> Response:
    """The answer to a load call: done, with nothing generated."""
    body: dict[str, Any] = {"model": model, "created_at": timestamp(), "done": True, "done_reason": "load"}
    body.update({"message": {"role": "assistant", "content": ""}} if chat else {"response": ""})
    if stream:
        return Response(orjson.dumps(body) + b"\n", media_type="application/x-ndjson")
    return json_response(body)


@router.post("/api/chat", openapi_extra=_documented(ChatRequest))
async def chat(request: Request) -> Response:
    body = await _parsed(request, ChatRequest)
    state = server_state(request)
    adapter = _check_model(state, body.model)
    if not body.messages:
        return _loaded(body.model, True, body.stream)
    reasoning_parser = _thinking_parser(state, body.think)
    plan = chat_plan(
        chat_request(body), state.tokenizer, _template(state), reasoning_parser, state.args.tool_call_parser
    )
    plan.input.lora_path = adapter
    plan.input.trace_context = trace_headers(request.headers)
    return await _respond(state, body.model, plan.input, plan.names, body.stream, True, plan.tools, plan.reasoning)


@router.post("/api/generate", openapi_extra=_documented(GenerateRequest))
async def generate(request: Request) -> Response:
    body = await _parsed(request, GenerateRequest)
    state = server_state(request)
    adapter = _check_model(state, body.model)
    if not body.prompt:
        return _loaded(body.model, False, body.stream)
    converted = generate_request(body)
    reasoning = None
    if isinstance(converted, ChatCompletionRequest):
        plan: Any = chat_plan(converted, state.tokenizer, _template(state), _thinking_parser(state, body.think))
        reasoning = plan.reasoning
    else:
        plan = completion_plan(converted, lambda ids: state.decode_ids(ids, "prompt"))
    plan.input.lora_path = adapter
    plan.input.trace_context = trace_headers(request.headers)
    return await _respond(state, body.model, plan.input, plan.names, body.stream, False, None, reasoning)


def _thinking_parser(state: ServerState, think: bool | str | None) -> str | None:
    """The reasoning parser that separates thinking when the request asks for it (`think`)."""
    if not think:
        return None
    if state.args.reasoning_parser is None:
        raise ApiError(400, "think needs a server started with --reasoning-parser", "think")
    return state.args.reasoning_parser


async def _respond(
    state: ServerState,
    model: str,
    obj: Any,
    names: dict[str, str],
    stream: bool,
    chat: bool,
    tools: ToolParsing | None,
    reasoning: ReasoningSplit | None = None,
) -> Response:
    if not stream:
        started = time.monotonic()
        (output,) = await run_to_end(state.manager, obj, names)
        meta = {"e2e_latency": time.monotonic() - started, **output["meta_info"]}
        body: dict[str, Any] = {"model": model, "created_at": timestamp()}
        split = split_thinking(output["text"], reasoning)
        if chat:
            body["message"] = assistant_message(split.content, tools, split.reasoning)
        else:
            body.update(response=split.content, **({"thinking": split.reasoning} if split.reasoning else {}))
        return json_response({**body, **done_fields(meta)})
    first, outputs = await start_stream(state.manager, obj, names)
    chunks = ChunkStream(model, chat, tools, reasoning)
    render = lambda output: [orjson.dumps(chunk) + b"\n" for chunk in chunks.update(output)]
    error = lambda api: orjson.dumps(ollama_error_body(api.status, api.message)) + b"\n"
    return StreamingResponse(stream_body(first, outputs, render, error, names), media_type="application/x-ndjson")
