"""Installs `sglang/`, an ordinary package whose design-card folders are links to the top level.

`sglang/runtime` is a relative link to `../runtime` (likewise `frontend`, `ops`, `platforms`, `ci`),
committed in git, so the tree reads as the design card while `sglang.runtime` is an ordinary
subpackage on disk: static tools (pyright, mypy, editors) resolve `sglang.*` imports to files, and
`pip install -e .` writes a plain path entry instead of an import hook. `find_packages` follows the
links, and a wheel holds real files, so nothing installs a generic top-level module like `runtime`.

Invariant: each name in `SUBPACKAGES` is a top-level folder with an `__init__.py`, reachable as
`sglang/<name>/__init__.py` (through the link in a checkout, as a plain folder in an sdist).
"""

from pathlib import Path

from setuptools import find_packages, setup

SUBPACKAGES = ("frontend", "runtime", "ops", "platforms", "ci")


def _check_links() -> None:
    """Stops the build, naming the fix, when a link does not lead to its folder.

    A checkout made with `core.symlinks=false` holds each link as a small text file, and the wheel
    would silently lack that folder.
    """
    here = Path(__file__).resolve().parent
    broken = [name for name in SUBPACKAGES if not (here / "sglang" / name / "__init__.py").is_file()]
    if broken:
        raise SystemExit(
            f"{', '.join(f'sglang/{name}' for name in broken)} must link to the top-level folders of the same names; "
            "clone with symlinks enabled (`git config core.symlinks true`, then check the links out again)"
        )


_check_links()
# package_dir {"": "."} keeps setuptools' editable install on its static strategy: a .pth that
# names the checkout, which static tools read, rather than an import-hook finder. That entry also
# lets `import runtime` work in an editable install; the code imports only `sglang.*`.
setup(packages=find_packages(include=["sglang", "sglang.*"]), package_dir={"": "."})
