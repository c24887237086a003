"""The folders setup.py maps onto `sglang.*`, and the module files under them."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SKIPPED_DIRS = frozenset({"__pycache__"})


def mapped_folders() -> dict[str, str]:
    """Top-level folder -> the package it installs as, read from setup.py's `SUBPACKAGES`."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "SUBPACKAGES" for t in node.targets):
            return {"sglang": "sglang", **{folder: f"sglang.{folder}" for folder in ast.literal_eval(node.value)}}
    raise AssertionError("setup.py no longer defines SUBPACKAGES; update this test with the new mapping")


def module_files(folder: str, root: Path = ROOT) -> list[Path]:
    """The .py files under a mapped folder of `root`, relative to it (caches and hidden folders excluded)."""
    base = root / folder
    return sorted(
        p.relative_to(base)
        for p in base.rglob("*.py")
        if not any(part in SKIPPED_DIRS or part.startswith(".") for part in p.relative_to(base).parts)
    )
