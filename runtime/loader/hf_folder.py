"""A Hugging Face model folder as a model source: config.json, safetensors weights, tokenizer files.

Weights come from `model.safetensors`, or from the shards a `model.safetensors.index.json` lists.
Everything that can be checked without reading tensor data is checked when the source is opened:
every shard the index names exists, every header is consistent with its file's size, and every
tensor the index assigns to a shard is in that shard. So a broken checkpoint fails at startup with
the file (and tensor) named, not halfway through building the model.

`weights()` yields `(Hugging Face tensor name, tensor)` in file order, floating tensors cast to the
source's dtype; given `read` (a tensor-parallel rank's slice of each tensor), only that slice
is read from the file. For tied-embedding models the checkpoint has no `lm_head.weight`, as on the Hub.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from .errors import CorruptCheckpointError, MissingFileError
from .safetensors_file import SafetensorsHeader, read_header
from .tokenizer import chat_template_in, load_tokenizer

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"


@dataclass(frozen=True)
class ModelSource:
    """An opened, validated model: what the model runner needs to build and fill a model.

    `folder` is a Hugging Face folder; for a GGUF file it is the converted copy in the cache and
    `origin` is the GGUF file. `shards` maps each safetensors file to the tensor names read from
    it, in the order `weights()` yields them.
    """

    folder: Path
    origin: Path
    config: dict[str, Any]
    dtype: torch.dtype
    shards: dict[Path, list[str]] = field(repr=False)

    @property
    def num_tensors(self) -> int:
        return sum(len(names) for names in self.shards.values())

    @property
    def tokenizer_path(self) -> Path:
        return self.folder

    @property
    def chat_template(self) -> str | None:
        """The chat template shipped with the tokenizer files, read without loading the tokenizer."""
        return chat_template_in(self.folder)

    def load_tokenizer(self) -> Any:
        return load_tokenizer(self.folder)

    def weights(
        self, read: Callable[[str], tuple[slice, ...] | None] | None = None
    ) -> Iterator[tuple[str, torch.Tensor]]:
        """`read(name)`: the slice of tensor `name` to read, None for all of it."""
        for path, names in self.shards.items():
            with safe_open(str(path), framework="pt") as f:
                for name in names:
                    index = read(name) if read is not None else None
                    tensor = f.get_tensor(name) if index is None else f.get_slice(name)[index]
                    yield name, tensor.to(self.dtype) if tensor.is_floating_point() else tensor


def open_hf_folder(folder: Path, dtype: torch.dtype, origin: Path | None = None) -> ModelSource:
    """Open and validate a Hugging Face folder (see the module docstring for what is checked)."""
    if not folder.is_dir():
        raise MissingFileError(f"model folder {folder} does not exist")
    return ModelSource(folder, origin or folder, read_config(folder), dtype, _shards(folder))


def read_config(folder: Path) -> dict[str, Any]:
    path = folder / "config.json"
    if not path.is_file():
        raise MissingFileError(f"{folder} has no config.json; a Hugging Face model folder needs one")
    try:
        config = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptCheckpointError(f"config.json in {folder} is not valid JSON: {exc}") from None
    if not isinstance(config, dict):
        raise CorruptCheckpointError(f"config.json in {folder} is not a JSON object")
    return config


def _shards(folder: Path) -> dict[Path, list[str]]:
    index = folder / INDEX_FILE
    if index.is_file():
        return _indexed_shards(index)
    single = folder / SINGLE_FILE
    if single.is_file():
        return {single: list(read_header(single).tensors)}
    others = sorted(p.name for p in folder.glob("*.safetensors"))
    if len(others) == 1:
        # Some exporters name the single file differently; with exactly one there is no ambiguity.
        only = folder / others[0]
        return {only: list(read_header(only).tensors)}
    found = ", ".join(others) or "none"
    hint = (
        " (pytorch_model.bin is not supported: convert it to safetensors)"
        if (folder / "pytorch_model.bin").exists()
        else ""
    )
    raise MissingFileError(f"{folder} has neither {SINGLE_FILE} nor {INDEX_FILE} (safetensors files: {found}){hint}")


def _indexed_shards(index: Path) -> dict[Path, list[str]]:
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise CorruptCheckpointError(f"{index.name} in {index.parent} has no valid weight_map: {exc!r}") from None
    by_shard: dict[str, list[str]] = {}
    for name, shard in weight_map.items():
        by_shard.setdefault(shard, []).append(name)
    missing = sorted(s for s in by_shard if not (index.parent / s).is_file())
    if missing:
        raise MissingFileError(f"{index.name} in {index.parent} lists shards that do not exist: {', '.join(missing)}")
    shards: dict[Path, list[str]] = {}
    for shard, names in sorted(by_shard.items()):
        header = read_header(index.parent / shard)
        _check_listed(header, names, index.name)
        # File order keeps reads sequential within each shard.
        shards[header.path] = sorted(names, key=lambda n: header.tensors[n].begin)
    return shards


def _check_listed(header: SafetensorsHeader, names: list[str], index_name: str) -> None:
    absent = [n for n in names if n not in header.tensors]
    if absent:
        shown = ", ".join(absent[:5]) + (f" and {len(absent) - 5} more" if len(absent) > 5 else "")
        raise CorruptCheckpointError(
            f"{index_name} assigns tensors to {header.path.name} that it does not contain: {shown}"
        )
