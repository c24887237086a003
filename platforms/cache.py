"""The per-user cache folder, and how an entry in it is published.

Root: `$SGLANG_CACHE_DIR`, default `~/.cache/sglang`; each user of it takes a subfolder named for
its kind (`gguf`, `torch_extensions`, `inductor`). It lives below both `platforms/` (kernel builds)
and `runtime/` (converted models), so neither imports the other for it.

Invariant: an entry directory, once it exists under its final name, is complete. Entries are
built in a temporary sibling and renamed into place; rename is atomic on one filesystem, so a
crashed build leaves only a dot-prefixed temporary directory, and of two processes building the
same entry at once, the first to rename wins and the other discards its copy.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

ENV_VAR = "SGLANG_CACHE_DIR"


def cache_root(kind: str) -> Path:
    """The folder for entries of `kind`; not created here."""
    base = os.environ.get(ENV_VAR) or Path.home() / ".cache" / "sglang"
    return Path(base) / kind


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
