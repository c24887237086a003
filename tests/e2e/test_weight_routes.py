"""Upstream's weight routes against a real server on the embedded model: `/get_weights_by_name`
reads the served checkpoint's values, `/update_weights_from_disk` reloads it in place (after the
request in flight finishes, emptying the prefix cache, relabelling the weights), and refuses what
cannot replace it with a 400 in upstream's shape, leaving the server serving."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf
import httpx
import numpy as np
import pytest

from sglang.ci.servers import GenerateStream, RunningServer

from ..loader.gguf_synth import Shape, random_state_dict, write_gguf

PROMPT = "Count: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13,"


def _tensor(path: Path, name: str) -> np.ndarray:
    tensor = next(t for t in gguf.GGUFReader(path).tensors if t.name == name)
    return gguf.quants.dequantize(tensor.data, tensor.tensor_type)


def _greedy(http: httpx.Client) -> dict[str, Any]:
    body = {"text": PROMPT, "sampling_params": {"max_new_tokens": 8, "temperature": 0}}
    response = http.post("/generate", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def test_get_weights_by_name(http: httpx.Client, server: RunningServer) -> None:
    path = Path(server.server_info()["model_path"])
    norm = http.post("/get_weights_by_name", json={"name": "model.norm.weight", "truncate_size": 5})
    assert norm.status_code == 200 and norm.json() == _tensor(path, "output_norm.weight")[:5].tolist()
    v = http.request("GET", "/get_weights_by_name", json={"name": "model.layers.0.self_attn.v_proj.weight"})
    assert v.status_code == 200
    rows = np.array(v.json())  # a piece of the fused qkv_proj, dequantized from its Q4_1 records
    assert rows.shape == (100, 576) and np.array_equal(rows, _tensor(path, "blk.0.attn_v.weight")[:100])
    tied = http.post("/get_weights_by_name", json={"name": "lm_head.weight", "truncate_size": 1}).json()
    assert (
        tied == http.post("/get_weights_by_name", json={"name": "model.embed_tokens.weight", "truncate_size": 1}).json()
    )
    unknown = http.post("/get_weights_by_name", json={"name": "model.nope.weight"})
    assert unknown.status_code == 400 and "model.nope.weight" in unknown.text
    assert http.post("/get_weights_by_name", json={"name": "model.norm.weight", "truncate_size": 0}).status_code == 400


def test_update_weights_from_disk_in_place(http: httpx.Client, server: RunningServer) -> None:
    info = server.server_info()
    before = _greedy(http)
    assert _greedy(http)["meta_info"]["cached_tokens"] > 0
    stream = GenerateStream(
        server, {"text": PROMPT, "sampling_params": {"max_new_tokens": 200, "ignore_eos": True}, "stream": True}
    )
    stream.start()
    assert stream.started.wait(60), "the stream did not start"
    try:
        body = {"model_path": info["model_path"], "weight_version": "reloaded"}
        updated = http.post("/update_weights_from_disk", json=body, timeout=600)
        assert updated.status_code == 200, updated.text
        assert updated.json() == {
            "success": True,
            "message": "Succeeded to update model weights. Weight version updated to reloaded.",
            "num_paused_requests": 0,
        }
        stream.join(120)
        final = stream.outputs[-1]["meta_info"]  # finished before the weights changed, not aborted
        assert final["finish_reason"]["type"] == "length" and final["weight_version"] == info["weight_version"]
        after = _greedy(http)
        assert after["meta_info"]["cached_tokens"] == 0, "the prefix cache kept KV of the old weights"
        assert after["text"] == before["text"] and after["meta_info"]["weight_version"] == "reloaded"
    finally:
        http.post("/update_weight_version", json={"new_version": info["weight_version"], "abort_all_requests": False})


def test_update_weights_from_disk_refusals(http: httpx.Client, tmp_path: Path) -> None:
    other = tmp_path / "other.gguf"
    write_gguf(other, Shape(), random_state_dict(Shape()))
    missing = http.post("/update_weights_from_disk", json={"model_path": str(tmp_path / "none.gguf")})
    assert (
        missing.status_code == 400 and missing.json()["success"] is False and "none.gguf" in missing.json()["message"]
    )
    different = http.post("/update_weights_from_disk", json={"model_path": str(other)})
    assert different.status_code == 400 and "different model" in different.json()["message"]
    for body in ({"model_path": str(other), "load_format": "dummy"}, {"model_path": str(other), "bogus": 1}, {}):
        response = http.post("/update_weights_from_disk", json=body)
        assert response.status_code == 400 and "error" in response.json(), (body, response.text)
    assert _greedy(http)["meta_info"]["completion_tokens"] == 8


@pytest.mark.parametrize("route", ["/update_weights_from_disk", "/get_weights_by_name"])
def test_weight_routes_are_in_the_openapi_schema(http: httpx.Client, route: str) -> None:
    assert route in http.get("/openapi.json").json()["paths"]
