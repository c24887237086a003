"""Fixtures shared by the loader tests.

The embedded GGUF is opened once per session and converted once into a session-scoped cache
directory; the conversion is done through the public `open_model_source`, with `GGUFFile.open`
patched to hand back the already-opened file so the slow GGUF parse happens only once.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from sglang.runtime.loader import EmbeddedModelMissingError, ModelSource, embedded_model_path, open_model_source
from sglang.runtime.loader.gguf_file import GGUFFile


@pytest.fixture(scope="session")
def embedded_path() -> Path:
    try:
        return embedded_model_path()
    except EmbeddedModelMissingError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def embedded_gguf(embedded_path: Path) -> GGUFFile:
    return GGUFFile.open(embedded_path)


@pytest.fixture(scope="session")
def loader_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sglang-cache")


@pytest.fixture(scope="session")
def embedded_source(embedded_gguf: GGUFFile, loader_cache: Path) -> ModelSource:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(GGUFFile, "open", classmethod(lambda cls, path: embedded_gguf))
        return open_model_source(None, "float32", cache_dir=loader_cache)


@pytest.fixture(scope="session")
def embedded_weights(embedded_source: ModelSource) -> dict[str, torch.Tensor]:
    return dict(embedded_source.weights())


@pytest.fixture(scope="session")
def embedded_tokenizer(embedded_source: ModelSource):
    return embedded_source.load_tokenizer()
