"""Upstream's LoRA routes: `POST /load_lora_adapter` and `POST /unload_lora_adapter`.

Bodies: `{"lora_name", "lora_path", "pinned"}` and `{"lora_name"}`. The answer is upstream's
`{"success", "error_message", "loaded_adapters"}`: 200 when done, 400 with the reason when not
(an unreadable folder, a rank over the maximum, an adapter in use), and nothing loaded halfway.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from sglang.runtime.lora.adapter import LoraError
from sglang.runtime.lora.paths import LoraRef
from sglang.runtime.processes.control import LoadLoraAdapter, LoraResult, UnloadLoraAdapter
from sglang.runtime.server.errors import ApiError, error_body, json_response
from sglang.runtime.server.native_api import json_body
from sglang.runtime.server.state import server_state

router = APIRouter()


def _answer(result: LoraResult) -> Response:
    if not result.success:
        body = {**error_body(400, result.error_message or "refused", "lora_name"), **result.to_json()}
        return json_response(body, status=400)
    return json_response(result.to_json())


@router.post("/load_lora_adapter")
async def load_lora_adapter(request: Request) -> Response:
    state = server_state(request)
    try:
        ref = LoraRef.from_json(await json_body(request))
    except LoraError as e:
        raise ApiError(400, str(e), "lora_name") from None
    result = await state.manager.control(LoadLoraAdapter(ref.name, ref.path, ref.pinned), timeout=300.0)
    return _answer(result)


@router.post("/unload_lora_adapter")
async def unload_lora_adapter(request: Request) -> Response:
    state = server_state(request)
    body = await json_body(request)
    name = body.get("lora_name") if isinstance(body, dict) else None
    if not isinstance(name, str) or not name:
        raise ApiError(400, "lora_name must be a non-empty string", "lora_name")
    return _answer(await state.manager.control(UnloadLoraAdapter(name)))
