"""The app's routers are matched in inclusion order with the generation routes first; that
order is safe only because no two routes anywhere share a path and a method."""

from __future__ import annotations

from collections import Counter
from typing import Any

from fastapi.routing import APIRoute

from sglang.runtime.server import app as app_module
from sglang.runtime.server.openai import openai_router


def flat_routes(router: Any) -> list[APIRoute]:
    """Every endpoint under `router`, in matching order (through included routers)."""
    found = []
    for route in router.routes:
        if isinstance(route, APIRoute):
            found.append(route)
        elif hasattr(route, "original_router"):
            found.extend(flat_routes(route.original_router))
    return found


def all_routers() -> list[Any]:
    return [value for name, value in vars(app_module).items() if name.endswith("_router")]


def test_no_two_routes_share_a_path_and_method() -> None:
    keys = Counter((r.path, m) for router in all_routers() for r in flat_routes(router) for m in r.methods)
    assert {("/generate", "POST"), ("/v1/messages", "POST"), ("/api/chat", "POST")} <= set(keys)  # every router
    assert [key for key, count in keys.items() if count > 1] == []


def test_generation_routes_come_first() -> None:
    paths = [r.path for r in flat_routes(openai_router)]
    assert paths[:2] == ["/v1/chat/completions", "/v1/completions"]
