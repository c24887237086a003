"""Checks that static import resolution finds a source file for every `sglang.*` import in the checkout.

`make test` runs it. The design card's folders reach `sglang` through links (`sglang/runtime` ->
`../runtime`, ...), so that pyright, mypy and editors see an ordinary package; this check keeps it
that way: a module imported from a path that does not exist, or a folder that reaches `sglang.*`
only through a runtime import hook, fails here with the file and line.

basedpyright (pyright's engine on PyPI, with its own Node.js in a wheel, so it runs offline once
installed) does the resolving, with every rule off except `reportMissingImports`.

Invariants:
- Resolution sees the checkout (its root as an extra path) and the standard library only. The
  installed environment is replaced by an empty one on purpose: reading torch's sources would
  triple the run time, and an unresolved `sglang.*` import then always means the tree, never
  the state of the venv. Third-party imports are therefore unresolved too, and ignored.
- Upstream SGLang's module paths (`sglang.lang.*`, `sglang.global_config`) exist only in
  `sys.modules` at run time (`frontend/compat.py`'s `ALIASES`); importing one passes when the
  module it aliases resolves to a file.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Never scanned: installs, build outputs and caches, which hold copies of the sources.
EXCLUDED = ("**/__pycache__", "**/.*", "**/build", "**/dist", "**/*.egg-info")
UNRESOLVED = re.compile(r'Import "(?P<module>[^"]+)" could not be resolved')


def upstream_aliases() -> dict[str, str]:
    """`frontend/compat.py`'s `ALIASES` (upstream module path -> ours), read without importing it."""
    tree = ast.parse((ROOT / "frontend" / "compat.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == "ALIASES":
            return ast.literal_eval(node.value)
    raise SystemExit("frontend/compat.py no longer defines ALIASES; update scripts/check_imports.py")


def module_file(module: str) -> Path | None:
    """The checkout's file for a dotted module name, found through the `sglang/` links, or None."""
    base = ROOT.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def is_ours(module: str) -> bool:
    """A module of this tree: `sglang` or below it, or a relative import."""
    return module == "sglang" or module.startswith(("sglang.", "."))


def pyright_config(empty_env: Path) -> dict:
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    (empty_env / "env" / "lib" / version / "site-packages").mkdir(parents=True)
    return {
        "include": [str(ROOT)],
        # Absolute: the config lives outside the checkout, and relative patterns match from it.
        "exclude": [str(ROOT / pattern) for pattern in EXCLUDED],
        "extraPaths": [str(ROOT)],
        "venvPath": str(empty_env),
        "venv": "env",
        "pythonVersion": f"{sys.version_info.major}.{sys.version_info.minor}",
        "typeCheckingMode": "off",
        "reportMissingImports": "error",
        "reportMissingModuleSource": "none",
    }


def run_pyright() -> tuple[dict, float]:
    """basedpyright's JSON report over the checkout, and how long it took."""
    pyright = Path(sysconfig.get_path("scripts")) / "basedpyright"
    if not pyright.is_file():
        raise SystemExit(f"{pyright} is missing: install the test extra (pip install -e '.[test]')")
    with tempfile.TemporaryDirectory(prefix="sglang-imports-") as tmp:
        config = Path(tmp) / "pyrightconfig.json"
        config.write_text(json.dumps(pyright_config(Path(tmp))))
        start = time.monotonic()
        proc = subprocess.run(
            [str(pyright), "--project", str(config), "--outputjson"],
            cwd=tmp,
            capture_output=True,
            text=True,
        )
        elapsed = time.monotonic() - start
    try:
        return json.loads(proc.stdout), elapsed
    except json.JSONDecodeError:
        output = proc.stdout + proc.stderr
        raise SystemExit(f"basedpyright printed no report (exit {proc.returncode}):\n{output}") from None


def main() -> int:
    report, elapsed = run_pyright()
    aliases = upstream_aliases()
    failures = []
    for diag in report["generalDiagnostics"]:
        match = UNRESOLVED.fullmatch(diag["message"])
        if not match or not is_ours(module := match["module"]):
            continue
        if module in aliases and module_file(aliases[module]) is not None:
            continue
        where = Path(diag["file"]).relative_to(ROOT)
        failures.append(f"{where}:{diag['range']['start']['line'] + 1}: `{module}` resolves to no file")
    files = report["summary"]["filesAnalyzed"]
    if failures:
        print(f"{len(failures)} unresolved sglang imports in {files} files:", *failures, sep="\n")
        return 1
    print(f"every sglang import in {files} files resolves to a source file ({elapsed:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
