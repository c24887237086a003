"""Fixtures for the LoRA tests: a tiny Llama and Qwen2 (with the embedded tokenizer) and three
random PEFT adapters of each, built once per session."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("peft", reason="the LoRA tests compare with PEFT (the test extra installs it)")

from sglang.ci.suites.lora_adapters import build_adapters, build_lora_model


class LoraModel:
    """A model folder and its adapters' folders by name."""

    def __init__(self, kind: str, root: Path) -> None:
        self.kind = kind
        self.path = build_lora_model(kind, root)
        self.adapters = build_adapters(self.path, root)

    def engine_args(self, startup: tuple[str, ...], max_total_tokens: int, **extra: Any) -> dict[str, Any]:
        """Engine keywords serving this model on cpu (float32, one thread) with the adapters named
        in `startup` loaded at start and two device slots of rank up to 16 on every module."""
        return {
            "model_path": str(self.path),
            "device": "cpu",
            "dtype": "float32",
            "cpu_threads": 1,
            "max_total_tokens": max_total_tokens,
            "lora_paths": tuple(f"{name}={self.adapters[name]}" for name in startup),
            "max_loras_per_batch": 2,
            "max_lora_rank": 16,
            "lora_target_modules": ("all",),
            **extra,
        }


_built: dict[str, LoraModel] = {}


@pytest.fixture(scope="session")
def lora_models(tmp_path_factory: pytest.TempPathFactory):
    def get(kind: str) -> LoraModel:
        if kind not in _built:
            _built[kind] = LoraModel(kind, tmp_path_factory.mktemp(f"lora-{kind}"))
        return _built[kind]

    return get
