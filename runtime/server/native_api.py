"""SGLang's native HTTP API, as SGLang's own clients (and the frontend's RuntimeEndpoint) use it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse

from sglang.runtime.observability.step_profiler import ProfileError, ProfileSettings
from sglang.runtime.observability.tracing import trace_headers
from sglang.runtime.processes.control import (
    ContinueGeneration,
    FlushCache,
    GetSchedulerStatus,
    PauseGeneration,
    StartProfile,
    StopProfile,
)
from sglang.runtime.processes.kv_concat_request import ConcatInput, run_concat
from sglang.runtime.processes.tokenizer_manager import last_item
from sglang.runtime.requests.generate_input import GenerateInput, InvalidRequestError
from sglang.runtime.requests.request_schema import ABORT_REQUEST_SCHEMA, generate_schema, openapi_body
from sglang.runtime.server.errors import ApiError, as_api_error, error_body, json_response
from sglang.runtime.server.state import server_state

router = APIRouter()


async def json_body(request: Request) -> Any:
    try:
        return orjson.loads(await request.body())
    except orjson.JSONDecodeError as e:
        raise ApiError(400, f"the request body is not valid JSON: {e}") from None


def sse(payload: Any) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


SSE_DONE = b"data: [DONE]\n\n"


async def sse_stream(outputs: AsyncIterator[Any]) -> AsyncIterator[bytes]:
    """Server-sent events of `outputs`, then `[DONE]`. An error once the stream has begun can
    only be reported in-band, as an error event. Closing this generator (client gone) closes
    `outputs`, which aborts the request."""
    try:
        async for out in outputs:
            yield sse(out)
    except Exception as e:
        api_error = as_api_error(e) or ApiError(500, f"internal error: {type(e).__name__}")
        yield sse(error_body(api_error.status, api_error.message, api_error.param))
    yield SSE_DONE


async def first_output(outputs: AsyncIterator[Any]) -> AsyncIterator[Any]:
    """Starts `outputs` so that errors raised before the first output (bad input, full queue)
    become HTTP errors rather than stream events; then replays it."""
    try:
        first = await anext(outputs)
    except StopAsyncIteration:
        return
    except Exception as e:
        raise as_api_error(e) or e from None

    async def replay() -> AsyncIterator[Any]:
        yield first
        async for out in outputs:
            yield out

    return replay()


async def until_disconnected(request: Request, awaitable: Awaitable[Any]) -> Any:
    """Awaits `awaitable`, cancelling it if the client disconnects first (which aborts the
    request in the tokenizer manager and frees its KV at once)."""
    work = asyncio.ensure_future(awaitable)

    async def watch() -> None:
        while not await request.is_disconnected():
            await asyncio.sleep(0.1)

    watcher = asyncio.ensure_future(watch())
    try:
        done, _ = await asyncio.wait({work, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if work not in done:
            work.cancel()
            raise ApiError(499, "the client disconnected")
        return work.result()
    finally:
        watcher.cancel()
        work.cancel()  # no-op once done; when this handler is cancelled, the request must not run on


@router.post("/generate", openapi_extra=openapi_body(generate_schema()))
async def generate(request: Request) -> Response:
    state = server_state(request)
    body = await json_body(request)
    try:
        obj = GenerateInput.from_dict(body)
    except (TypeError, InvalidRequestError) as e:
        raise as_api_error(e) or ApiError(400, str(e)) from None
    adapter = state.check_model(obj.model)
    if adapter is not None and obj.lora_path is None:
        obj.lora_path = adapter
    obj.trace_context = trace_headers(request.headers)
    outputs = state.manager.generate(obj)
    if obj.stream:
        return StreamingResponse(sse_stream(await first_output(outputs)), media_type="text/event-stream")
    try:
        result = await until_disconnected(request, last_item(outputs))
    except Exception as e:
        raise as_api_error(e) or e from None
    raise_server_failure(result)
    return json_response(result)


def raise_server_failure(result: dict[str, Any] | list[dict[str, Any]]) -> None:
    """A request that ended because of a failure of ours (its model step raised: an abort with a
    5xx status) is answered with that status in the error shape, not as a 200 with an abort."""
    for output in result if isinstance(result, list) else [result]:
        reason = output["meta_info"].get("finish_reason") or {}
        if reason.get("type") == "abort" and reason.get("status_code", 400) >= 500:
            raise ApiError(reason["status_code"], reason.get("message") or "internal error")


@router.api_route("/flush_cache", methods=["GET", "POST"])
async def flush_cache(request: Request) -> Response:
    """Empties the device tier (the radix tree over the KV pool); refused with 409 while requests
    run or wait. With `--enable-hierarchical-cache` this is an eviction of everything: what
    leaves the pool is backed up to the host tier where it has room, and the host and storage
    tiers keep what they hold (valid KV of this model, loaded again on the next match; delete
    the storage folder to drop stored blocks)."""
    result = await server_state(request).manager.control(FlushCache())
    if not result.ok:
        raise ApiError(409, f"cache not flushed: {result.reason}")
    return Response("Cache flushed.\n", status_code=200)


async def optional_body(request: Request) -> dict[str, Any]:
    """A JSON object body, or {} when the body is empty."""
    body = await json_body(request) if (await request.body()).strip() else {}
    if not isinstance(body, dict):
        raise ApiError(400, "the body must be a JSON object")
    return body


@router.post("/pause_generation")
async def pause_generation(request: Request) -> Response:
    """Upstream's: no model step runs until `/continue_generation`; requests that arrive meanwhile
    wait. `mode`: `abort` (default: every request ends now), `retract` (running requests go back
    to the queue, their KV released) or `in_place` (they stay as they are)."""
    body = await optional_body(request)
    try:
        message = PauseGeneration(**body)
    except (TypeError, ValueError) as e:
        raise ApiError(400, str(e), "mode") from None
    state = server_state(request)
    await state.manager.control(message)
    state.paused = True
    return json_response({"message": "Generation paused successfully.", "status": "ok"})


@router.post("/continue_generation")
async def continue_generation(request: Request) -> Response:
    """Upstream's: steps run again. `torch_empty_cache` (default true): first return the device
    allocator's cached blocks to the device."""
    body = await optional_body(request)
    empty_cache = body.pop("torch_empty_cache", True)
    if body or not isinstance(empty_cache, bool):
        raise ApiError(400, "the body takes one field, torch_empty_cache (a boolean)")
    state = server_state(request)
    await state.manager.control(ContinueGeneration(empty_cache))
    state.paused = False
    return json_response({"message": "Generation continued successfully.", "status": "ok"})


@router.api_route("/start_profile", methods=["GET", "POST"])
async def start_profile(request: Request) -> Response:
    """Upstream's: a torch profiler trace of the scheduler's model steps, until `/stop_profile` or
    for `num_steps` steps. The body (optional) takes upstream's `ProfileReq` fields: `output_dir`,
    `start_step`, `num_steps`, `activities`, `with_stack`, `record_shapes`, `profile_id`,
    `profile_prefix`. Refused with 400 and the reason (one already running, a bad field)."""
    try:
        settings = ProfileSettings.from_json(await optional_body(request))
    except ProfileError as e:
        raise ApiError(400, str(e)) from None
    result = await server_state(request).manager.control(StartProfile(settings))
    if not result.success:
        raise ApiError(400, result.message)
    return Response("Start profiling.\n", status_code=200)


@router.api_route("/stop_profile", methods=["GET", "POST"])
async def stop_profile(request: Request) -> Response:
    """Upstream's: ends the profile and writes its trace (`<profile_id>-TP-0.trace.json.gz`)."""
    result = await server_state(request).manager.control(StopProfile())
    if not result.success:
        raise ApiError(400, result.message)
    return Response("Stop profiling. This will take some time.\n", status_code=200)


@router.post("/concat_and_append")
async def concat_and_append(request: Request) -> Response:
    """Our extension (frontend `join("concate_and_append")`): caches `prefix` followed by every
    branch from the branches' own KV. Not ok is a 200 with a reason; see `runtime/processes/kv_concat_request.py`."""
    body = await json_body(request)
    try:
        obj = ConcatInput.from_dict(body)
        return json_response(await run_concat(server_state(request).manager, obj))
    except Exception as e:
        raise as_api_error(e) or e from None


@router.post("/concate_and_append_request")
async def concate_and_append_request(request: Request) -> dict[str, Any]:
    """Upstream SGLang's frontend at `join("concate_and_append")`: `{"src_rids": [...],
    "dst_rid": ...}`, the ids of its fork streams. Its client names those streams by ids it never
    sends with their generations, so no server can find their KV by them; it has already
    appended the forks' text to the destination stream, whose next request sends that text and
    reuses the shared prefix from the radix cache. So: validated, and answered 200 with
    `concatenated: false` (a refusal is an exception in upstream's client, which then never
    finishes the program). Our own frontend calls `/concat_and_append`, which does join the KV."""
    body = await json_body(request)
    if not isinstance(body, dict):
        raise ApiError(400, "the body must be {'src_rids': [str, ...], 'dst_rid': str}")
    src_rids, dst_rid = body.get("src_rids"), body.get("dst_rid")
    if not isinstance(src_rids, list) or not all(isinstance(r, str) for r in src_rids):
        raise ApiError(400, "src_rids must be a list of strings", "src_rids")
    if not isinstance(dst_rid, str):
        raise ApiError(400, "dst_rid must be a string", "dst_rid")
    return {
        "concatenated": False,
        "reason": "request ids of upstream's fork streams are unknown to the server; "
        "the destination's next request reuses the cached prefix",
    }


@router.post("/abort_request", openapi_extra=openapi_body(ABORT_REQUEST_SCHEMA))
async def abort_request(request: Request) -> dict[str, Any]:
    body = await json_body(request)
    rid = body.get("rid") if isinstance(body, dict) else None
    if not isinstance(rid, str):
        raise ApiError(400, "give the request id to abort as {'rid': ...}", "rid")
    return {"rid": rid, "aborted": server_state(request).manager.abort(rid)}


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    state = server_state(request)
    status = await state.manager.control(GetSchedulerStatus())
    return Response(state.extras["metrics"].render(status), media_type="text/plain; version=0.0.4")
