"""GET /v1/models and /v1/models/{model}: the one model this server serves.

Its id is `ServerState.model_name` (`--served-model-name`, else the model path), the name the
other endpoints accept; `root` is the model path, `max_model_len` the context length.
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Request, Response

from sglang.runtime.server.openai.responses import json_response
from sglang.runtime.server.state import ServerState, server_state

router = APIRouter()


def model_card(state: ServerState, created: int) -> dict[str, Any]:
    return {
        "id": state.model_name,
        "object": "model",
        "created": created,
        "owned_by": "sglang",
        "root": state.info.model_path,
        "max_model_len": state.info.context_length,
    }


def _created(state: ServerState) -> int:
    # The time the server state was made stands for the model's creation: stable across calls.
    return state.extras.setdefault("openai_model_created", int(time.time()))


@router.get("/v1/models")
async def list_models(request: Request) -> Response:
    state = server_state(request)
    return json_response({"object": "list", "data": [model_card(state, _created(state))]})


@router.get("/v1/models/{model:path}")
async def retrieve_model(model: str, request: Request) -> Response:
    state = server_state(request)
    state.check_model(model)
    return json_response(model_card(state, _created(state)))
