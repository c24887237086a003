"""Every repository path that the docs name in backticks exists.

The docs are the markdown files and the docstrings and comments of every .py file. A backticked
token is taken for a repository path when it is one word holding a `/` that starts with a
top-level folder (`runtime/memory/`, `tests/ci/`), or a relative path ending in a source file's
extension (csrc/bindings.cpp). URLs, absolute and home paths, `..` paths, module names
(`sglang.ops`), command lines (they hold spaces) and templates (`platforms/<device>`, `{name}`)
are not paths; a third-party file is named by its module (`torch_npu.npu.graphs`).

Where a path resolves: from the repository root, or from the folder of the file that names it
(a docstring in `platforms/kernels/cpu_cpp/build.py` may say csrc/bindings.cpp). A glob
(`benchmarks/bench_*.py`) must match at least one file. A `:line`, `:name` or `::test` suffix is
not part of the path.
"""

from __future__ import annotations

import ast
import functools
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Never scanned: installs, build outputs and caches, which hold copies of the sources.
SKIPPED_PARTS = frozenset({"__pycache__", "build", "dist"})
# A relative path ending in one of these names a file of this repository wherever it starts.
SOURCE_SUFFIXES = frozenset({".py", ".md", ".sh", ".toml", ".cpp", ".h"})
BACKTICKED = re.compile(r"(?<!`)`([^`\s]+)`(?!`)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
# `path.py:123`, `path.py:Name`, `path.py::test_name`: the part after the colon is not a path.
SUFFIX = re.compile(r":[:\w.\[\]-]*$")
DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
NOT_A_PATH = re.compile(r"://|^[/~.$]|[<>{}()=,;|@'\"]")


def top_level_folders() -> frozenset[str]:
    return frozenset(p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))


def checkout_files(pattern: str) -> list[Path]:
    """The checkout's files matching `pattern`; `Path.rglob` does not follow the `sglang/` links."""
    return sorted(
        p
        for p in ROOT.rglob(pattern)
        if not any(
            part.startswith(".") or part in SKIPPED_PARTS or part.endswith(".egg-info")
            for part in p.relative_to(ROOT).parts
        )
    )


def python_doc_text(source: str) -> Iterator[tuple[int, str]]:
    """(line, text) of each docstring and comment of a module."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, DOCUMENTED) and (doc := ast.get_docstring(node, clean=False)) is not None:
            yield node.body[0].lineno, doc
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string


def markdown_text(text: str) -> Iterator[tuple[int, str]]:
    """(line, text) of each line of prose; fenced blocks are code, not prose."""
    text = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    yield from enumerate(text.splitlines(), start=1)


def repo_path(token: str, folders: frozenset[str]) -> str | None:
    """The repository path a backticked token names, or None when it names none."""
    if NOT_A_PATH.search(token) or "/" not in token:
        return None
    path = SUFFIX.sub("", token)
    first = path.split("/", 1)[0]
    if first in folders or Path(path.rstrip("/")).suffix in SOURCE_SUFFIXES:
        return path
    return None


def resolves(path: str, folder: Path) -> bool:
    for base in (ROOT, folder):
        if "*" in path:
            if next(base.glob(path), None) is not None:
                return True
        elif (base / path).exists() and (not path.endswith("/") or (base / path).is_dir()):
            return True
    return False


@functools.cache
def documented_paths() -> tuple[tuple[Path, int, str], ...]:
    """(file, line, path) for every repository path named in backticks in the docs."""
    return tuple(_scan_docs())


def _scan_docs() -> Iterator[tuple[Path, int, str]]:
    folders = top_level_folders()
    sources = [(path, markdown_text) for path in checkout_files("*.md")]
    sources += [(path, python_doc_text) for path in checkout_files("*.py")]
    for file, extract in sources:
        for line, text in extract(file.read_text()):
            for offset, chunk in enumerate(text.splitlines()):
                for token in BACKTICKED.findall(chunk):
                    if (path := repo_path(token, folders)) is not None:
                        yield file, line + offset, path


def test_the_scan_sees_the_docs():
    """The extraction finds paths that exist, in markdown, docstrings and comments alike."""
    found = {(file.relative_to(ROOT).as_posix(), path) for file, _, path in documented_paths()}
    assert ("README.md", "benchmarks/README.md") in found
    assert any(file.endswith(".py") for file, _ in found)


def test_path_recognition():
    folders = frozenset({"runtime", "tests", "ci"})
    assert repo_path("runtime/scheduler/", folders) == "runtime/scheduler/"
    assert repo_path("tests/ci/test_x.py::test_y", folders) == "tests/ci/test_x.py"
    assert repo_path("runtime/engine.py:42", folders) == "runtime/engine.py"
    assert repo_path("csrc/bindings.cpp", folders) == "csrc/bindings.cpp"
    for not_a_path in (
        "https://github.com/sgl-project/sglang",
        "sglang.runtime.engine",
        "tokens/s",
        "~/.cache/sglang",
        "/proc/self/status",
        "../shared/DESIGN.md",
        "platforms/<device>",
        "runtime/{name}.py",
        "int8/int4",
    ):
        assert repo_path(not_a_path, folders) is None, not_a_path


def test_path_resolution():
    assert resolves("runtime/", ROOT) and not resolves("runtime/engine.py/", ROOT)
    assert not resolves("runtime/no_such_module.py", ROOT)
    assert resolves("benchmarks/bench_*.py", ROOT) and not resolves("benchmarks/no_such_*.py", ROOT)
    assert resolves("csrc/bindings.cpp", ROOT / "platforms" / "kernels" / "cpu_cpp"), "beside the naming file"


def test_every_backticked_repository_path_exists():
    missing = [
        f"{file.relative_to(ROOT)}:{line}: `{path}`"
        for file, line, path in documented_paths()
        if not resolves(path, file.parent)
    ]
    assert not missing, "docs name paths that do not exist:\n" + "\n".join(missing)
