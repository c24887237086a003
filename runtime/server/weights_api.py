"""Upstream's weight-management route for RL loops: `POST /update_weight_version` relabels the
served weights (the `weight_version` of every later output's `meta_info` and of
`/server_info`), by default after aborting every request in flight, so that no output mixes two
labels. Loading new weights (`/update_weights_from_disk` and the rest) is not served yet.
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict, StrictBool, StrictStr

from sglang.runtime.server.errors import json_response
from sglang.runtime.server.state import server_state

router = APIRouter()


class UpdateWeightVersion(BaseModel):
    """Upstream's `UpdateWeightVersionReqInput`."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"new_version": "step-100"}]})
    new_version: StrictStr
    abort_all_requests: StrictBool = True


@router.post("/update_weight_version")
async def update_weight_version(body: UpdateWeightVersion, request: Request) -> Response:
    manager = server_state(request).manager
    if body.abort_all_requests:
        for rid in list(manager.pending):
            manager.abort(rid)
    manager.weight_version = body.new_version
    message = f"Weight version updated to {body.new_version}"
    return json_response({"success": True, "message": message, "new_version": body.new_version})
