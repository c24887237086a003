"""An opened GGUF file: the reader, its metadata as plain Python values, and its tensor index.

`gguf.GGUFReader` memory-maps the file; parsing the metadata (mostly the 49k-entry vocabulary of
the embedded model) is the slow part of opening it (seconds; `benchmarks/README.md`, "Measured
costs"), so one `GGUFFile` is opened per conversion and shared by the config, tensor and
tokenizer steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gguf

from .errors import CorruptCheckpointError, MissingFileError


@dataclass(frozen=True)
class GGUFFile:
    """Invariant: `tensors` holds every tensor of the file, by GGUF name, in file order."""

    path: Path
    metadata: dict[str, Any]
    tensors: dict[str, gguf.ReaderTensor] = field(repr=False)

    @classmethod
    def open(cls, path: Path) -> GGUFFile:
        if not path.is_file():
            raise MissingFileError(f"GGUF file {path} does not exist")
        try:
            reader = gguf.GGUFReader(path)
        except (ValueError, OSError, IndexError, KeyError) as exc:
            # The reader raises bare numpy/struct errors on short or garbled files.
            raise CorruptCheckpointError(f"{path.name} is truncated or corrupt: {exc!r} (file: {path})") from None
        metadata = {name: f.contents() for name, f in reader.fields.items()}
        return cls(path, metadata, {t.name: t for t in reader.tensors})

    @property
    def architecture(self) -> str:
        arch = self.metadata.get("general.architecture")
        if not isinstance(arch, str):
            raise CorruptCheckpointError(f"{self.path.name} has no general.architecture metadata")
        return arch

    def arch_value(self, key: str, default: Any = None) -> Any:
        """`{architecture}.{key}` from the metadata (llama.cpp namespaces model hyperparameters)."""
        return self.metadata.get(f"{self.architecture}.{key}", default)

    def require(self, key: str) -> Any:
        value = self.arch_value(key)
        if value is None:
            raise CorruptCheckpointError(f"{self.path.name} lacks the metadata key {self.architecture}.{key}")
        return value
