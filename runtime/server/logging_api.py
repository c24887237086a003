"""Upstream's `/configure_logging`: turn the per-request log line on or off and set the log level
of this process and the scheduler's, while the server runs. The request-dump and crash-dump
folders of upstream are not served (a 400 names them); `log_requests_level` and
`log_requests_format` are accepted and change nothing, since no request content is ever logged.
"""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict, StrictBool, StrictStr

from sglang.runtime.processes.control import SetLogLevel
from sglang.runtime.server.errors import ApiError
from sglang.runtime.server.state import server_state

router = APIRouter()

LEVELS = ("debug", "info", "warning", "error", "critical")
UNSERVED = ("dump_requests_folder", "dump_requests_threshold", "crash_dump_folder", "dump_requests_exclude_meta_keys")


class ConfigureLogging(BaseModel):
    """Upstream's `ConfigureLoggingReq`."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"log_requests": True}]})
    log_requests: StrictBool | None = None
    log_requests_level: int | None = None
    log_requests_format: StrictStr | None = None
    log_level: StrictStr | None = None
    dump_requests_folder: StrictStr | None = None
    dump_requests_threshold: int | None = None
    crash_dump_folder: StrictStr | None = None
    dump_requests_exclude_meta_keys: list[StrictStr] | None = None


@router.api_route("/configure_logging", methods=["GET", "POST"])
async def configure_logging(body: ConfigureLogging, request: Request) -> Response:
    state = server_state(request)
    unserved = next((name for name in UNSERVED if getattr(body, name) is not None), None)
    if unserved is not None:
        raise ApiError(400, f"{unserved}: request and crash dumps are not served here", unserved)
    if body.log_level is not None and body.log_level.lower() not in LEVELS:
        raise ApiError(400, f"log_level must be one of {', '.join(LEVELS)}", "log_level")
    if body.log_requests is not None:
        state.log_requests = body.log_requests
    if body.log_level is not None:
        level = body.log_level.upper()
        logging.getLogger().setLevel(level)
        await state.manager.control(SetLogLevel(level))
    logging.getLogger(__name__).info("logging configured: %s", body.model_dump(exclude_none=True))
    return Response(status_code=200)
