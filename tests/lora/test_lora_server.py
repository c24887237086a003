"""LoRA through a real `sglang serve`: one device slot, three adapters under concurrent traffic,
loads and unloads at run time, KV never shared across adapters, upstream's routes and fields,
and bad input answered 400 with the reason (nothing loaded halfway).

Correctness of every output is checked against PEFT (teacher-forced greedy tokens), so a slot
written with the wrong adapter after an eviction fails the test.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch

from sglang.ci.servers import ServerGroup, serve_spec
from sglang.ci.servers.running import RunningServer
from sglang.ci.suites.lora_adapters import peft_reference, reference_log_probs

PROMPT = [1500 + i for i in range(24)]
"""24 plain tokens: long enough that a cached prefix shows in `cached_tokens`."""


@pytest.fixture(scope="module")
def model(lora_models):
    return lora_models("llama")


@pytest.fixture(scope="module")
def server(model, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    flags = ("--model-path", str(model.path), "--max-total-tokens", "2048", "--log-level", "warning")
    lora = ("--lora-paths", f"a={model.adapters['a']}", "--max-loras-per-batch", "1", "--max-lora-rank", "16")
    with ServerGroup(tmp_path_factory.mktemp("lora-servers")) as group:
        yield group.launch(serve_spec(*flags, *lora))


@pytest.fixture(scope="module")
def http(server: RunningServer) -> Iterator[httpx.Client]:
    with server.client() as client:
        yield client


def generate(http: httpx.Client, lora_path: Any, prompts: list[list[int]], new_tokens: int = 5) -> httpx.Response:
    body = {
        "input_ids": prompts if len(prompts) > 1 else prompts[0],
        "sampling_params": {"temperature": 0, "max_new_tokens": new_tokens, "ignore_eos": True},
        "lora_path": lora_path,
    }
    return http.post("/generate", json=body)


def peft_greedy(references: dict, model, adapter: str | None, prompt: list[int], output: list[int]) -> list[int]:
    if adapter not in references:
        references[adapter] = peft_reference(model.path, model.adapters[adapter] if adapter else None)
    return reference_log_probs(references[adapter], prompt, output).argmax(-1).tolist()


def test_startup_adapter_is_listed(http: httpx.Client, model) -> None:
    ids = [card["id"] for card in http.get("/v1/models").json()["data"]]
    assert ids == [str(model.path), f"{model.path}:a"]


def test_three_adapters_one_slot(http: httpx.Client, model) -> None:
    for name in ("b", "c"):
        reply = http.post("/load_lora_adapter", json={"lora_name": name, "lora_path": str(model.adapters[name])})
        assert reply.status_code == 200, reply.text
        assert reply.json()["success"] and name in reply.json()["loaded_adapters"]
    batch = [None, "a", "b", "a", "c", "b"]
    gen = torch.Generator().manual_seed(3)
    prompts = [torch.randint(17, 49152, (6 + i,), generator=gen).tolist() for i in range(len(batch))]
    reply = generate(http, batch, prompts)
    assert reply.status_code == 200, reply.text
    references: dict = {}
    for adapter, prompt, out in zip(batch, prompts, reply.json()):
        assert out["output_ids"] == peft_greedy(references, model, adapter, prompt, out["output_ids"]), adapter


def test_kv_is_not_shared_across_adapters(http: httpx.Client) -> None:
    def cached(adapter: str | None) -> int:
        reply = generate(http, adapter, [PROMPT], new_tokens=1)
        assert reply.status_code == 200, reply.text
        return reply.json()["meta_info"]["cached_tokens"]

    cached("a")
    assert cached("a") >= len(PROMPT) - 1, "the same adapter shares its cached prefix"
    assert cached("b") == 0, "another adapter must not reuse adapter a's KV"
    assert cached(None) == 0, "the base model must not reuse an adapter's KV"


def test_openai_model_names_an_adapter(http: httpx.Client, model) -> None:
    native = generate(http, "c", [PROMPT]).json()
    body = {"model": f"{model.path}:c", "prompt": PROMPT, "max_tokens": 5, "temperature": 0, "ignore_eos": True}
    reply = http.post("/v1/completions", json=body)
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["text"] == native["text"]
    body["model"] = f"{model.path}:nope"
    reply = http.post("/v1/completions", json=body)
    assert reply.status_code == 400 and "'nope' is not loaded" in reply.text


def _bad_adapter(root: Path, name: str, config: dict[str, Any] | None) -> Path:
    folder = root / name
    folder.mkdir()
    if config is not None:
        (folder / "adapter_config.json").write_text(json.dumps(config))
    return folder


def test_bad_adapters_are_400_and_load_nothing(http: httpx.Client, model, tmp_path: Path) -> None:
    before = http.get("/v1/models").json()["data"]
    config = json.loads((model.adapters["a"] / "adapter_config.json").read_text())
    over_rank = _bad_adapter(tmp_path, "big", {**config, "r": 32})
    weights = "adapter_model.safetensors"
    (over_rank / weights).write_bytes((model.adapters["a"] / weights).read_bytes())
    cases = {
        str(tmp_path / "missing"): "is not a folder",
        str(_bad_adapter(tmp_path, "empty", None)): "is not a PEFT adapter",
        str(_bad_adapter(tmp_path, "head", {**config, "target_modules": ["lm_head"]})): "'lm_head' is not supported",
        str(over_rank): "over --max-lora-rank 16",
    }
    for path, reason in cases.items():
        reply = http.post("/load_lora_adapter", json={"lora_name": "bad", "lora_path": path})
        assert reply.status_code == 400 and reason in reply.json()["error_message"], reply.text
    reply = generate(http, "bad", [PROMPT])
    assert reply.status_code == 400 and "'bad' is not loaded" in reply.text
    assert http.get("/v1/models").json()["data"] == before


def test_unload(http: httpx.Client) -> None:
    reply = http.post("/unload_lora_adapter", json={"lora_name": "b"})
    assert reply.status_code == 200 and "b" not in reply.json()["loaded_adapters"]
    assert generate(http, "b", [PROMPT]).status_code == 400
    reply = http.post("/unload_lora_adapter", json={"lora_name": "b"})
    assert reply.status_code == 400 and "not loaded" in reply.json()["error_message"]
