"""Where converted models are cached: the key of a cache entry.

Root: `cache_root("gguf")`, i.e. `$SGLANG_CACHE_DIR/gguf`, default `~/.cache/sglang/gguf` (the
folder and the atomic publishing of entries are `sglang.platforms.cache`'s). An entry is a Hugging
Face folder named `<file stem>-<key>`, where the key hashes the source file's resolved path, size
and modification time together with `FORMAT_VERSION`: touching or replacing the file, or changing
what a conversion writes, gives a new entry (stale ones are left for the user to delete).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from sglang.platforms.cache import cache_root, publish

__all__ = ["FORMAT_VERSION", "cache_root", "entry_name", "publish"]

# Bump when the content of a converted folder changes, so old entries are not reused.
FORMAT_VERSION = 1


def entry_name(source: Path) -> str:
    resolved = source.resolve()
    stat = resolved.stat()
    ident = f"{resolved}|{stat.st_size}|{stat.st_mtime_ns}|v{FORMAT_VERSION}"
    return f"{resolved.stem}-{hashlib.sha256(ident.encode()).hexdigest()[:16]}"
