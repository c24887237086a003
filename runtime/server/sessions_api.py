"""Upstream's session routes (`runtime/processes/sessions.py`): `/open_session` answers the new
session's id as a JSON string, `/close_session` an empty 200 (also for a session already gone,
as upstream). Both take GET or POST with a JSON body."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr

from sglang.runtime.requests.errors import InvalidRequestError
from sglang.runtime.server.errors import ApiError, json_response
from sglang.runtime.server.state import server_state

router = APIRouter()


class OpenSession(BaseModel):
    """Upstream's `OpenSessionReqInput`; `capacity_of_str_len` is accepted and bounds nothing here."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"capacity_of_str_len": 1000}]})
    capacity_of_str_len: int
    session_id: StrictStr | None = None
    streaming: StrictBool | None = None
    timeout: float | None = Field(None, gt=0)
    """Seconds of inactivity after which the session closes."""


class CloseSession(BaseModel):
    model_config = ConfigDict(extra="forbid")
    session_id: StrictStr


@router.api_route("/open_session", methods=["GET", "POST"])
async def open_session(body: OpenSession, request: Request) -> Response:
    state = server_state(request)
    if body.streaming and not state.args.enable_streaming_session:
        raise ApiError(400, "Streaming sessions are disabled. Please relaunch with --enable-streaming-session.")
    try:
        session_id = state.manager.sessions.open(body.session_id, bool(body.streaming), body.timeout)
    except InvalidRequestError as e:
        raise ApiError(400, str(e), e.param) from None
    return json_response(session_id)


@router.api_route("/close_session", methods=["GET", "POST"])
async def close_session(body: CloseSession, request: Request) -> Response:
    server_state(request).manager.sessions.close(body.session_id)
    return Response(status_code=200)
