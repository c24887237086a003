"""The storage tier across a restart of a real server: a long prompt served once, the server
stopped and started again on the same storage folder, the same prompt again: its stored prefix
is reported as `cached_tokens` (OpenAI usage and `meta_info`), fewer tokens are prefilled, the
output is identical, and `/metrics` counts the hits per tier; `/flush_cache` leaves the host
and storage tiers, so the prefix then comes from the host tier (`cached_tokens_details`).

Two server starts make it slow (`make test-slow`); the default run covers the same restart
in-process (tests/runtime/test_hierarchical_cache.py: a fresh pool on the same folder)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sglang.ci.servers import RunningServer, ServerGroup, serve_spec

BLOCK = 32
PROMPT = " ".join(f"Item {i}: the {['red', 'green', 'blue'][i % 3]} box holds {i * 7 % 11} stones." for i in range(40))


def complete(server: RunningServer) -> dict[str, Any]:
    with server.client() as client:
        response = client.post(
            "/v1/completions",
            json={
                "model": server.model_name(),
                "prompt": PROMPT,
                "max_tokens": 8,
                "temperature": 0,
                "return_cached_tokens_details": True,
            },
        )
    response.raise_for_status()
    return response.json()


def generate(server: RunningServer) -> dict[str, Any]:
    with server.client() as client:
        response = client.post(
            "/generate", json={"text": PROMPT, "sampling_params": {"max_new_tokens": 8, "temperature": 0}}
        )
    response.raise_for_status()
    return response.json()


def start(server_group: Callable[..., RunningServer], folder: Path) -> RunningServer:
    flags = (
        "--max-total-tokens",
        "2048",
        "--enable-hierarchical-cache",
        "--hicache-storage-backend",
        "file",
        "--hicache-storage-prefetch-policy",
        "wait_complete",
        "--hicache-storage-backend-extra-config",
        f'{{"block_tokens": {BLOCK}}}',
    )
    return server_group(serve_spec(*flags, env={"SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR": str(folder)}))


@pytest.mark.slow
def test_a_stored_prefix_survives_a_restart(tmp_path: Path):
    folder = tmp_path / "hicache"
    with ServerGroup(tmp_path) as group:
        first = start(group.launch, folder)
        cold = complete(first)
        cold_info = first.server_info()
        assert first.stop() == 0
        assert any(folder.rglob("*.kv")), "nothing was stored"

        second = start(group.launch, folder)
        warm = complete(second)
        prompt_tokens = warm["usage"]["prompt_tokens"]
        cached = warm["usage"]["prompt_tokens_details"]["cached_tokens"]
        assert cached == (prompt_tokens - 1) // BLOCK * BLOCK and cached >= 300
        assert warm["choices"][0]["text"] == cold["choices"][0]["text"]
        split = {"device": 0, "host": 0, "storage": cached, "storage_backend": "file"}
        assert warm["sglext"]["cached_tokens_details"] == split
        info = second.server_info()
        assert info["prompt_tokens"] == cold_info["prompt_tokens"] - cached  # fewer tokens prefilled
        assert info["storage_hit_tokens"] == cached and info["storage_blocks_rejected"] == 0
        assert second.metric_total('sglang_cache_hit_tokens{tier="storage"}') == cached

        # Flushing empties the device tier only: what left it (the whole prompt, backed up token
        # by token on its way out) comes from the host tier now, all but the last token.
        assert second.get("/flush_cache").status_code == 200
        again = generate(second)
        assert again["meta_info"]["cached_tokens_details"] == {
            "device": 0,
            "host": prompt_tokens - 1,
            "storage": 0,
            "storage_backend": "file",
        }
        assert again["meta_info"]["cached_tokens"] == prompt_tokens - 1
        assert again["text"] == cold["choices"][0]["text"]
        assert second.server_info()["host_hit_tokens"] == prompt_tokens - 1
        device = generate(second)["meta_info"]
        whole = {"device": prompt_tokens - 1, "host": 0, "storage": 0, "storage_backend": "file"}
        assert device["cached_tokens_details"] == whole  # the pool has all of it now
