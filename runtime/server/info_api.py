"""What SGLang's routers (smg, sglang-router) and clients read about a server: model and server
info under both of upstream's names, and `/get_load`.

`/server_info` carries the settings with their resolved values (the model path actually served,
not the null the flag defaulted to), the live scheduler state, and the fields routers parse:
`served_model_name`, `tp_size`, `dp_size`, `max_running_requests`, `max_total_num_tokens`.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from sglang.runtime.processes.control import GetSchedulerStatus
from sglang.runtime.server.state import server_state

router = APIRouter()


@router.get("/get_model_info")
@router.get("/model_info")
async def model_info(request: Request) -> dict[str, Any]:
    state = server_state(request)
    return {**state.info.model_info(), "served_model_name": state.model_name}


@router.get("/get_server_info")
@router.get("/server_info")
async def server_info(request: Request) -> dict[str, Any]:
    state = server_state(request)
    status = await state.manager.control(GetSchedulerStatus())
    args = {k: v for k, v in vars(state.args).items() if k != "api_key"}
    info = state.info
    return {
        **args,
        **status.to_json(),
        "model_path": info.model_path,
        "tokenizer_path": info.tokenizer_path,
        "served_model_name": state.model_name,
        "weight_version": state.manager.weight_version,
        "context_length": info.context_length,
        "max_total_num_tokens": info.max_total_tokens,
        "tp_size": state.args.tp_size,
        # Data parallelism is the routers' job here (several servers behind one): one rank each.
        "dp_size": 1,
        "device": info.device,
        "dtype": info.dtype,
        "op_table": info.op_table,
        "version": _version(),
    }


@router.get("/get_load")
async def get_load(request: Request) -> list[dict[str, Any]]:
    """Upstream's shape: one entry per data-parallel rank (one here). sglang-router balances
    on the sum of `num_tokens`."""
    status = await server_state(request).manager.control(GetSchedulerStatus())
    return [
        {
            "dp_rank": 0,
            "num_reqs": status.num_running_requests + status.num_waiting_requests,
            "num_waiting_reqs": status.num_waiting_requests,
            "num_tokens": status.num_request_tokens,
        }
    ]


def _version() -> str:
    from sglang import __version__

    return __version__
