"""Upstream's weight-management routes for RL loops:
- `POST /update_weight_version` relabels the served weights (the `weight_version` of every later
  output's `meta_info` and of `/server_info`), by default after aborting every request in
  flight, so that no output mixes two labels;
- `POST /update_weights_from_disk` replaces the weights in place by another checkpoint of the
  same model (`runtime/loader/live_weights.py`): new requests wait and those in flight finish
  first (or are aborted, `abort_all_requests`), then the prefix cache is emptied;
- `GET|POST /get_weights_by_name` reads a checkpoint tensor back (its first `truncate_size` rows).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr

from sglang.runtime.processes.control import GetWeightsByName, UpdateWeightsFromDisk
from sglang.runtime.server.errors import ApiError, error_response, json_response
from sglang.runtime.server.state import server_state

router = APIRouter()


class UpdateWeightVersion(BaseModel):
    """Upstream's `UpdateWeightVersionReqInput`."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"new_version": "step-100"}]})
    new_version: StrictStr
    abort_all_requests: StrictBool = True


class UpdateWeightsFromDiskBody(BaseModel):
    """Upstream's `UpdateWeightFromDiskReqInput`. `is_async`, `torch_empty_cache`, `keep_pause`,
    `recapture_cuda_graph`, `token_step` and `manifest` are accepted and change nothing here: the
    update is always synchronous, captured steps read the weights in place, and it never pauses."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"model_path": "/models/step-100"}]})
    model_path: StrictStr
    load_format: StrictStr | None = None
    abort_all_requests: StrictBool = False
    weight_version: StrictStr | None = None
    is_async: StrictBool = False
    torch_empty_cache: StrictBool = False
    keep_pause: StrictBool = False
    recapture_cuda_graph: StrictBool = False
    token_step: int = 0
    flush_cache: StrictBool = True
    manifest: dict[str, Any] | None = None


class GetWeightsByNameBody(BaseModel):
    """Upstream's `GetWeightsByNameReqInput`."""

    model_config = ConfigDict(extra="forbid")
    name: StrictStr
    truncate_size: int = Field(100, ge=1)


@router.post("/update_weight_version")
async def update_weight_version(body: UpdateWeightVersion, request: Request) -> Response:
    if body.abort_all_requests:
        server_state(request).manager.abort_all()
    server_state(request).manager.weight_version = body.new_version
    message = f"Weight version updated to {body.new_version}"
    return json_response({"success": True, "message": message, "new_version": body.new_version})


@router.post("/update_weights_from_disk")
async def update_weights_from_disk(body: UpdateWeightsFromDiskBody, request: Request) -> Response:
    state = server_state(request)
    manager = state.manager
    try:
        message = UpdateWeightsFromDisk(body.model_path, body.flush_cache, body.load_format)
    except ValueError as e:
        raise ApiError(400, str(e), "load_format") from None
    if state.paused and manager.pending and not body.abort_all_requests:
        # Paused requests would never finish, and the update waits for them.
        raise ApiError(400, "generation is paused with requests in flight: continue it or set abort_all_requests")
    result = await manager.update_weights(message, abort_all=body.abort_all_requests)
    text = result.message
    if result.success and body.weight_version is not None:
        manager.weight_version = body.weight_version
        text += f" Weight version updated to {body.weight_version}."
    payload = {"success": result.success, "message": text, "num_paused_requests": 0}
    return json_response(payload, 200 if result.success else 400)


@router.api_route("/get_weights_by_name", methods=["GET", "POST"])
async def get_weights_by_name(body: GetWeightsByNameBody, request: Request) -> Response:
    result = await server_state(request).manager.control(GetWeightsByName(body.name, body.truncate_size))
    if result.parameter is None:
        return error_response(ApiError(400, result.error or f"no parameter {body.name!r}", "name"))
    return json_response(result.parameter)
