"""The LoRA manager alone (no server): device slots, eviction by policy, pinning, refusals that
leave nothing behind. The model is the tiny step-runner decoder, whose shapes are the tiny
Hugging Face Llama's the adapters were made for."""

from __future__ import annotations

import pytest
import torch

from sglang.runtime.lora.adapter import LoraError
from sglang.runtime.lora.manager import LoraManager
from sglang.runtime.lora.paths import LoraRef, parse_lora_path
from tests.tiny_decoder import tiny_llama_decoder

ALL = frozenset({"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"})


def manager(slots: int, policy: str = "lru", max_loaded: int | None = None, targets=ALL) -> LoraManager:
    return LoraManager(tiny_llama_decoder(), slots, 16, targets, max_loaded, policy)


def load(m: LoraManager, adapters, *names: str, pinned: bool = False) -> None:
    for name in names:
        m.load(LoraRef(name, str(adapters[name]), pinned))


def slot_of(m: LoraManager, name: str) -> int | None:
    return next((i for i, s in enumerate(m.slots) if s.name == name), None)


def q_lora_a(m: LoraManager, slot: int) -> torch.Tensor:
    layer, part = m.state.layers["model.layers.0.self_attn.q_proj"]
    return layer.a[slot, part * layer.rank : (part + 1) * layer.rank]


def cycle(m: LoraManager, *names: str) -> None:
    for name in names:
        m.release(m.acquire(name))


def test_one_slot_waits_then_evicts(lora_models) -> None:
    adapters = lora_models("llama").adapters
    m = manager(1)
    load(m, adapters, "a", "b")
    held = m.acquire("a")
    assert held == 1 and m.acquire("b") is None, "a held slot is never taken"
    m.release(held)
    assert m.acquire("b") == 1 and slot_of(m, "a") is None
    rank = m.adapters["b"].adapter.rank
    a_weight = m.adapters["b"].adapter.weights["model.layers.0.self_attn.q_proj"][0]
    assert torch.equal(q_lora_a(m, 1)[:rank], a_weight) and not q_lora_a(m, 1)[rank:].any()
    assert m.acquire(None) == 0 and not m.state.scaling[0]


@pytest.mark.parametrize(("policy", "evicted"), [("lru", "b"), ("fifo", "a")])
def test_eviction_policy(lora_models, policy: str, evicted: str) -> None:
    m = manager(2, policy)
    load(m, lora_models("llama").adapters, "a", "b", "c")
    cycle(m, "a", "b", "a", "c")  # a placed first, but used after b
    assert slot_of(m, evicted) is None and slot_of(m, "c") is not None


def test_pinned_adapter_keeps_its_slot(lora_models) -> None:
    adapters = lora_models("llama").adapters
    m = manager(2)
    load(m, adapters, "a", pinned=True)
    load(m, adapters, "b", "c")
    pinned_slot = slot_of(m, "a")
    assert pinned_slot is not None, "a pinned adapter is placed at load"
    cycle(m, "b", "c", "b", "c")
    assert slot_of(m, "a") == pinned_slot
    with pytest.raises(LoraError, match="no device slot for unpinned"):
        m.load(LoraRef("a2", str(adapters["a"]), pinned=True))


def test_refusals_leave_nothing_loaded(lora_models) -> None:
    adapters = lora_models("llama").adapters
    m = manager(2, max_loaded=2, targets=frozenset({"q_proj", "v_proj"}))
    with pytest.raises(LoraError, match="no LoRA slots for"):
        load(m, adapters, "a")  # a targets every projection
    load(m, adapters, "b")
    with pytest.raises(LoraError, match="already loaded"):
        load(m, adapters, "b")
    m.use("b")
    with pytest.raises(LoraError, match="used by 1 unfinished"):
        m.unload("b")
    m.unuse("b")
    slot = m.acquire("b")
    m.release(slot)
    m.unload("b")
    assert m.adapters == {} and not q_lora_a(m, slot).any() and not m.state.scaling[slot]
    with pytest.raises(LoraError, match="'b' is not loaded"):
        m.acquire("b")


def test_lora_paths_forms() -> None:
    assert parse_lora_path("x=/p") == LoraRef("x", "/p")
    assert parse_lora_path("/p") == LoraRef("/p", "/p")
    assert parse_lora_path('{"lora_name": "x", "lora_path": "/p", "pinned": true}') == LoraRef("x", "/p", True)
    for bad in ('{"lora_name": 3}', "{not json", "a:b=/p"):
        with pytest.raises(LoraError):
            parse_lora_path(bad)
