"""End-to-end fixtures: real `sglang serve` processes on real loopback ports.

One server (`server`) is started per session on `$SGLANG_TEST_DEVICE` (default cpu), with a
small KV cache, and shared by every test that needs no special flags; it is parametrized by the
device, so every test that uses it names the device in its id (what the matrix counts). Tests
that need special flags (an API key, a tiny queue, SIGTERM) start their own short-lived server
through `server_factory`. conftest files import these fixtures. Servers start through the
one launcher, `sglang.ci.servers` (its environment variables: device, cpu threads, startup
deadline).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from sglang.ci.servers import DEVICE, RunningServer, ServerGroup, serve_spec

SHARED_KV_TOKENS = 8192


@pytest.fixture(scope="session")
def server_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., RunningServer]]:
    """Starts `sglang serve` with the given flags (and API key); every server it started is
    stopped at the end of the session, passed or failed."""
    with ServerGroup(tmp_path_factory.mktemp("servers")) as group:

        def factory(*flags: str, api_key: str | None = None, wait: bool = True) -> RunningServer:
            return group.launch(serve_spec(*flags, api_key=api_key), wait=wait)

        yield factory


@pytest.fixture(scope="session", params=[DEVICE], ids=[DEVICE])
def server(server_factory: Callable[..., RunningServer]) -> RunningServer:
    """The session's shared server: default flags, a small KV cache. With `$SGLANG_E2E_PORT`
    set, the server already listening on that loopback port instead."""
    if os.environ.get("SGLANG_E2E_PORT"):
        return RunningServer.attach(int(os.environ["SGLANG_E2E_PORT"]))
    return server_factory("--max-total-tokens", str(SHARED_KV_TOKENS))


@pytest.fixture(scope="session")
def http(server: RunningServer) -> Iterator[httpx.Client]:
    with server.client() as client:
        yield client


@pytest.fixture(scope="session")
def model_info(http: httpx.Client) -> dict[str, Any]:
    response = http.get("/get_model_info")
    response.raise_for_status()
    return response.json()


@pytest.fixture(scope="session")
def tokenizer(model_info: dict[str, Any]) -> Any:
    """The server's own tokenizer (to count tokens and build `input_ids` prompts)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_info["tokenizer_path"])
