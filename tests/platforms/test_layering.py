"""`platforms/` sits below `runtime/`: runtime imports platforms, never the other way round."""

from __future__ import annotations

import ast
from pathlib import Path

PLATFORMS = Path(__file__).resolve().parents[2] / "platforms"


def _imported(tree: ast.AST) -> list[str]:
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
    return names


def test_platforms_do_not_import_runtime() -> None:
    sources = sorted(PLATFORMS.rglob("*.py"))
    assert len(sources) > 20, "the platforms folder was not found"
    offenders = [
        f"{path.relative_to(PLATFORMS.parent)}: {name}"
        for path in sources
        for name in _imported(ast.parse(path.read_text()))
        if name == "sglang.runtime" or name.startswith("sglang.runtime.")
    ]
    assert not offenders, offenders
