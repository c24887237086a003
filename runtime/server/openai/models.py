"""GET /v1/models and /v1/models/{model}: the model this server serves, and its LoRA adapters.

The model's id is `ServerState.model_name` (`--served-model-name`, else the model path), the name
the other endpoints accept; `root` is the model path, `max_model_len` the context length. Each
loaded adapter is listed as upstream does: id `<model>:<adapter>` (the name the OpenAI routes
accept), `root` its PEFT folder, `parent` the model.
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


def adapter_cards(state: ServerState, created: int) -> list[dict[str, Any]]:
    if not state.info.lora_enabled:
        return []
    return [
        {
            **model_card(state, created),
            "id": f"{state.model_name}:{name}",
            "root": path,
            "parent": state.model_name,
        }
        for name, path in sorted(state.manager.admission.lora_adapters.items())
    ]


@router.get("/v1/models")
async def list_models(request: Request) -> Response:
    state = server_state(request)
    created = _created(state)
    return json_response({"object": "list", "data": [model_card(state, created), *adapter_cards(state, created)]})


@router.get("/v1/models/{model:path}")
async def retrieve_model(model: str, request: Request) -> Response:
    state = server_state(request)
    created = _created(state)
    adapter = state.check_model(model)
    if adapter is None:
        return json_response(model_card(state, created))
    return json_response(next(c for c in adapter_cards(state, created) if c["id"].endswith(f":{adapter}")))
