"""Where converted models are cached, and how a cache entry is published.

Root: `$SGLANG_CACHE_DIR/gguf`, default `~/.cache/sglang/gguf`. An entry is a Hugging Face folder
named `<file stem>-<key>`, where the key hashes the source file's resolved path, size and
modification time together with `FORMAT_VERSION`: touching or replacing the file, or changing what
a conversion writes, gives a new entry (stale ones are left for the user to delete).

Invariant: an entry directory, once it exists under its final name, is complete. Entries are
built in a temporary sibling and renamed into place; rename is atomic on one filesystem, so a
crashed conversion leaves only a dot-prefixed temporary directory, and of two processes converting
the same file at once (e.g. tensor-parallel workers), the first to rename wins and the other
discards its copy.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

# Bump when the content of a converted folder changes, so old entries are not reused.
FORMAT_VERSION = 1
ENV_VAR = "SGLANG_CACHE_DIR"


def cache_root(kind: str = "gguf") -> Path:
    base = os.environ.get(ENV_VAR) or Path.home() / ".cache" / "sglang"
    return Path(base) / kind


def entry_name(source: Path) -> str:
    resolved = source.resolve()
    stat = resolved.stat()
    ident = f"{resolved}|{stat.st_size}|{stat.st_mtime_ns}|v{FORMAT_VERSION}"
    return f"{resolved.stem}-{hashlib.sha256(ident.encode()).hexdigest()[:16]}"


def publish(target: Path, build: Callable[[Path], None]) -> Path:
    """Make `target` exist: run `build(tmp_dir)` and rename the result to `target` atomically."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        build(tmp)
        try:
            tmp.rename(target)
        except OSError:
            if not target.is_dir():
                raise
            # Another process published the same entry first; its copy is as good as ours.
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target
