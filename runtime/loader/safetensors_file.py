"""The safetensors file format: validating headers on read, streaming tensors on write.

Layout: an 8-byte little-endian header length N, N bytes of JSON (`{name: {dtype, shape,
data_offsets: [begin, end]}, "__metadata__": {...}}`, offsets relative to the end of the header),
then the data. The safetensors library rejects a bad file with terse messages
("MetadataIncompleteBuffer"), so headers are validated here first, and a failure names the file and,
where one is at fault, the tensor.

Invariants of a `SafetensorsHeader`: every entry's byte span equals numel * itemsize and lies
inside the file, so reading any listed tensor cannot run past the end of the file.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from .errors import CorruptCheckpointError

# The safetensors library refuses larger headers; a bigger length means the first 8 bytes are not a header.
_MAX_HEADER_BYTES = 100 * 1024 * 1024
_ITEMSIZE = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "U16": 2,
    "I16": 2,
    "F16": 2,
    "BF16": 2,
    "U32": 4,
    "I32": 4,
    "F32": 4,
    "U64": 8,
    "I64": 8,
    "F64": 8,
}
_TORCH_NAME = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16"}


@dataclass(frozen=True)
class TensorEntry:
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


@dataclass(frozen=True)
class SafetensorsHeader:
    path: Path
    tensors: dict[str, TensorEntry]
    metadata: dict[str, str]


def _corrupt(path: Path, why: str) -> CorruptCheckpointError:
    return CorruptCheckpointError(f"{path.name} is truncated or corrupt: {why} (file: {path})")


def read_header(path: Path) -> SafetensorsHeader:
    """Parse and validate the header of `path` against the file's size."""
    size = path.stat().st_size
    with path.open("rb") as f:
        prefix = f.read(8)
        if len(prefix) < 8:
            raise _corrupt(path, f"the file has {size} bytes, fewer than the 8-byte header length")
        (length,) = struct.unpack("<Q", prefix)
        if length > _MAX_HEADER_BYTES:
            raise _corrupt(path, f"header length {length} is implausible; this is not a safetensors file")
        if 8 + length > size:
            raise _corrupt(path, f"the header declares {length} bytes but only {size - 8} follow its length")
        raw = f.read(length)
    try:
        parsed = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _corrupt(path, f"the header is not valid JSON ({exc})") from None
    if not isinstance(parsed, dict):
        raise _corrupt(path, "the header is not a JSON object")
    metadata = parsed.pop("__metadata__", None) or {}
    available = size - 8 - length
    tensors = {name: _entry(path, name, spec, available) for name, spec in parsed.items()}
    used = max((e.end for e in tensors.values()), default=0)
    if used != available:
        raise _corrupt(path, f"the tensors cover {used} data bytes but the file holds {available}")
    return SafetensorsHeader(path, tensors, metadata)


def _entry(path: Path, name: str, spec: object, available: int) -> TensorEntry:
    try:
        dtype, shape, (begin, end) = spec["dtype"], tuple(int(d) for d in spec["shape"]), spec["data_offsets"]  # type: ignore[index]
    except (TypeError, KeyError, ValueError):
        raise _corrupt(path, f"tensor {name!r} has a malformed header entry: {spec!r}") from None
    if dtype not in _ITEMSIZE:
        raise _corrupt(path, f"tensor {name!r} has unknown dtype {dtype!r}")
    expected = math.prod(shape) * _ITEMSIZE[dtype]
    if not (0 <= begin <= end) or end - begin != expected:
        raise _corrupt(path, f"tensor {name!r} spans bytes [{begin}, {end}) but {dtype}{list(shape)} needs {expected}")
    if end > available:
        raise _corrupt(path, f"tensor {name!r} ends at data byte {end} but the file holds only {available} data bytes")
    return TensorEntry(dtype, shape, begin, end)


@dataclass(frozen=True)
class TensorSpec:
    """What `write_streaming` will be given for one tensor, known before any data is produced."""

    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]


def write_streaming(
    path: Path,
    specs: Sequence[TensorSpec],
    tensors: Iterable[tuple[str, torch.Tensor]],
    metadata: dict[str, str] | None = None,
) -> None:
    """Write a safetensors file one tensor at a time, so memory peaks at the largest tensor.

    `tensors` must yield exactly `specs`, in order, with matching dtype and shape; the header is
    written from `specs` before any data, which is why they are needed upfront.
    """
    header: dict[str, object] = {"__metadata__": metadata or {}}
    offset = 0
    for spec in specs:
        nbytes = math.prod(spec.shape) * spec.dtype.itemsize
        header[spec.name] = {
            "dtype": _TORCH_NAME[spec.dtype],
            "shape": list(spec.shape),
            "data_offsets": [offset, offset + nbytes],
        }
        offset += nbytes
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)  # the format aligns the data start to 8 bytes
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(encoded)))
        f.write(encoded)
        produced = iter(tensors)
        for spec in specs:
            name, tensor = next(produced)
            if name != spec.name or tensor.dtype != spec.dtype or tuple(tensor.shape) != spec.shape:
                raise ValueError(f"{path.name}: expected {spec}, got {name} {tensor.dtype} {tuple(tensor.shape)}")
            f.write(tensor.contiguous().reshape(-1).view(torch.uint8).numpy().data)
        if next(produced, None) is not None:
            raise ValueError(f"{path.name}: more tensors were produced than specified")
