"""The file storage tier: KV blocks on disk, keyed by the token prefix they end and the model.

A block is `block_tokens` consecutive tokens of a prompt, starting at a multiple of
`block_tokens`. Its key chains the key of the block before it with its own tokens and the model
identity (`block_keys`), so a key names the whole prefix up to the block's end, and two servers
of one model that cache the same prefix write the same file. Files live under
`<storage_dir>/<model identity>/<key[:2]>/<key>.kv`; a server never opens another model's
folder, and the header repeats the identity in case a file is copied across.

File format: one JSON header line (magic, version, model, parent key, the block's tokens, dtype,
shape, payload length, blake2b digest of the payload), then the raw payload bytes.

Invariants:
- A block is used only if its header matches exactly what was asked for (model, parent key,
  tokens, dtype, shape) and the payload has the stated length and digest; anything else
  (corrupt, truncated, foreign) is reported as a miss, counted, and the file removed, so the
  caller recomputes those tokens.
- Writers never expose a partial file: each writes a private temporary file in the target folder
  and renames it into place (atomic on POSIX), so concurrent servers sharing a folder race only
  to publish identical bytes.
- Storage errors (a full or read-only disk) never fail a request: the block is not stored and
  the error is counted and logged once.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import torch

logger = logging.getLogger(__name__)

MAGIC = "sglang-kv-block"
VERSION = 1


def block_keys(model_id: str, token_ids: Sequence[int], block_tokens: int) -> list[str]:
    """The key of every whole block of `token_ids`, in order."""
    keys: list[str] = []
    parent = ""
    for start in range(0, len(token_ids) - block_tokens + 1, block_tokens):
        digest = hashlib.sha256(f"{model_id}|{parent}|".encode())
        digest.update(",".join(map(str, token_ids[start : start + block_tokens])).encode())
        parent = digest.hexdigest()
        keys.append(parent)
    return keys


@dataclass
class StoreStats:
    """Counters of one store since start (the /metrics figures of the storage tier)."""

    blocks_written: int = 0
    blocks_read: int = 0
    blocks_rejected: int = 0  # corrupt, truncated or foreign: removed and recomputed
    write_errors: int = 0


class FilePageStore:
    def __init__(self, storage_dir: str | Path, model_id: str) -> None:
        self.root = Path(storage_dir) / model_id
        self.model_id = model_id
        self.stats = StoreStats()
        self._warned = False

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.kv"

    def contains(self, key: str) -> bool:
        return self.path(key).is_file()

    def save(self, key: str, parent: str, tokens: Sequence[int], block: torch.Tensor) -> bool:
        """Publishes `block` (a host tensor) under `key`; False when storage refused it."""
        payload = memoryview(block.contiguous().reshape(-1).view(torch.uint8).numpy()) if block.numel() else b""
        header = {
            "magic": MAGIC,
            "version": VERSION,
            "model": self.model_id,
            "parent": parent,
            "tokens": list(tokens),
            "dtype": str(block.dtype).removeprefix("torch."),
            "shape": list(block.shape),
            "length": len(payload),
            "digest": hashlib.blake2b(payload).hexdigest(),
        }
        target = self.path(key)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}.", suffix=".tmp", dir=target.parent)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(json.dumps(header).encode() + b"\n")
                    f.write(payload)
                os.replace(tmp, target)
            except BaseException:
                os.unlink(tmp)
                raise
        except OSError as exc:
            self.stats.write_errors += 1
            if not self._warned:
                logger.warning("storage tier: cannot write under %s (%s); blocks stay uncached", self.root, exc)
                self._warned = True
            return False
        self.stats.blocks_written += 1
        return True

    def load(
        self, key: str, parent: str, tokens: Sequence[int], dtype: torch.dtype, shape: Sequence[int]
    ) -> torch.Tensor | None:
        """The block stored under `key` if it is exactly the one asked for, else None. The payload
        is read straight into the returned tensor (one copy out of the page cache), and only
        once the header matched."""
        path = self.path(key)
        try:
            with open(path, "rb") as f:
                block, reason = _read_block(f, self.model_id, parent, list(tokens), dtype, list(shape))
        except OSError:
            return None
        if block is None:
            self.stats.blocks_rejected += 1
            logger.warning("storage tier: rejected %s (%s); recomputing it", path.name, reason)
            with contextlib.suppress(OSError):  # read-only storage: it stays rejected on every read
                path.unlink()
            return None
        self.stats.blocks_read += 1
        return block


HEADER_LIMIT = 1 << 20
"""Longest header line read: a block's tokens, as JSON, are far shorter."""


def _read_block(
    f: BinaryIO, model_id: str, parent: str, tokens: list[int], dtype: torch.dtype, shape: list[int]
) -> tuple[torch.Tensor | None, str]:
    """The block in an open file and why it is unusable ("" when it is usable)."""
    line = f.readline(HEADER_LIMIT)
    try:
        header = json.loads(line) if line.endswith(b"\n") else None
    except ValueError:
        header = None
    if not isinstance(header, dict) or header.get("magic") != MAGIC or header.get("version") != VERSION:
        return None, "not a KV block file"
    expected = {
        "model": model_id,
        "parent": parent,
        "tokens": tokens,
        "dtype": str(dtype).removeprefix("torch."),
        "shape": shape,
    }
    for name, value in expected.items():
        if header.get(name) != value:
            return None, f"its {name} differs from the one asked for"
    block = torch.empty(shape, dtype=dtype)
    payload = memoryview(block.view(-1).view(torch.uint8).numpy()) if block.numel() else memoryview(b"")
    if len(payload) != header.get("length"):
        return None, f"its length {header.get('length')} is not the {len(payload)} bytes of its shape"
    got = f.readinto(payload) if len(payload) else 0
    if got != len(payload) or f.read(1):
        return None, f"truncated: {got} of {len(payload)} bytes" if got != len(payload) else "trailing bytes"
    if hashlib.blake2b(payload).hexdigest() != header.get("digest"):
        return None, "checksum mismatch"
    return block, ""
