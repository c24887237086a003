"""The GGUF conversion cache: reuse without touching the GGUF, keys, rebuilds, concurrent publishing."""

from __future__ import annotations

import os
from pathlib import Path

import gguf
import pytest
import torch

from sglang.runtime.loader import ModelSource, cache_root, open_model_source
from sglang.runtime.loader.cache import entry_name, publish
from sglang.runtime.loader.gguf_file import GGUFFile

from .gguf_synth import Shape, random_state_dict, write_gguf


def _refuse(*args: object, **kwargs: object) -> None:
    raise AssertionError("the GGUF file was read again although its conversion is cached")


def test_second_open_reuses_cache(
    embedded_source: ModelSource, loader_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(GGUFFile, "open", classmethod(_refuse))
    monkeypatch.setattr(gguf, "GGUFReader", _refuse)
    # Other loader tests share this cache folder (the quantized repack sits beside the conversion).
    before = sorted(p.name for p in loader_cache.iterdir())
    again = open_model_source(None, "bfloat16", cache_dir=loader_cache)
    assert again.folder == embedded_source.folder and again.origin == embedded_source.origin
    assert again.dtype == torch.bfloat16 and again.config == embedded_source.config
    assert embedded_source.folder.name in before
    assert sorted(p.name for p in loader_cache.iterdir()) == before, "the second open wrote a new entry"
    name, tensor = next(again.weights())
    assert tensor.dtype == torch.bfloat16 and name.startswith("model.")


def test_cache_root_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SGLANG_CACHE_DIR", str(tmp_path))
    assert cache_root("gguf") == tmp_path / "gguf"
    monkeypatch.delenv("SGLANG_CACHE_DIR")
    assert cache_root("gguf") == Path.home() / ".cache" / "sglang" / "gguf"


def test_key_follows_file_identity(tmp_path: Path) -> None:
    shape = Shape(layers=1)
    path = tmp_path / "m.gguf"
    write_gguf(path, shape, random_state_dict(shape))
    first = entry_name(path)
    assert first.startswith("m-") and entry_name(path) == first
    os.utime(path, ns=(0, path.stat().st_mtime_ns + 1_000_000))
    assert entry_name(path) != first


def test_damaged_entry_is_rebuilt(tmp_path: Path) -> None:
    shape = Shape(layers=1)
    state = random_state_dict(shape)
    write_gguf(tmp_path / "m.gguf", shape, state)
    source = open_model_source(tmp_path / "m.gguf", "float32", cache_dir=tmp_path / "cache")
    (source.folder / "model.safetensors").write_bytes(b"\0" * 8)
    rebuilt = open_model_source(tmp_path / "m.gguf", "float32", cache_dir=tmp_path / "cache")
    assert rebuilt.folder == source.folder
    assert torch.equal(dict(rebuilt.weights())["model.norm.weight"], state["model.norm.weight"])


def test_publish_loser_discards_its_copy(tmp_path: Path) -> None:
    target = tmp_path / "entry"

    def build_while_another_process_wins(tmp: Path) -> None:
        (tmp / "mine").write_text("late")
        target.mkdir()
        (target / "theirs").write_text("first")

    assert publish(target, build_while_another_process_wins) == target
    assert [p.name for p in tmp_path.iterdir()] == ["entry"] and [p.name for p in target.iterdir()] == ["theirs"]


def test_failed_build_leaves_nothing(tmp_path: Path) -> None:
    def fail(tmp: Path) -> None:
        (tmp / "partial").write_text("x")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        publish(tmp_path / "entry", fail)
    assert not list(tmp_path.iterdir())
