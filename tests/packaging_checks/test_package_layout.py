"""Every module under the folders setup.py maps onto `sglang.*` belongs to a package it finds.

setup.py lists packages with `find_packages`, which only sees folders that have an `__init__.py`
(and whose parents all have one). A folder without it is silently left out of the wheel, while an
editable install still imports it as a namespace package, so only this check catches it cheaply.

The mapping is a relative link per folder (`sglang/runtime` -> `../runtime`), so `sglang/` is an
ordinary package and the editable install a plain path entry that static tools follow.
"""

from __future__ import annotations

import json
import os
import runpy
from importlib import metadata
from pathlib import Path

import pytest
import setuptools

from .layout import ROOT, mapped_folders, module_files


def package_of(package_root: str, relative: Path) -> str:
    return ".".join((package_root, *relative.parent.parts))


@pytest.fixture(scope="module")
def setup_kwargs() -> dict:
    """What setup.py passes to `setup()`, computed by setup.py itself from the checkout."""
    captured: dict = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(setuptools, "setup", lambda **kwargs: captured.update(kwargs))
        mp.chdir(ROOT)  # setup.py's find_packages calls are relative to the checkout
        runpy.run_path(str(ROOT / "setup.py"), run_name="__main__")
    return captured


def test_mapped_folders_exist():
    for folder in mapped_folders():
        assert (ROOT / folder / "__init__.py").is_file(), f"{folder}/ is mapped by setup.py but has no __init__.py"


def test_every_folder_with_modules_is_a_package():
    """A folder holding .py files, and every folder between it and its mapped root, has an __init__.py."""
    missing = set()
    for folder in mapped_folders():
        for relative in module_files(folder):
            parent = relative.parent
            while parent != Path("."):
                if not (ROOT / folder / parent / "__init__.py").is_file():
                    missing.add(f"{folder}/{parent.as_posix()}/")
                parent = parent.parent
    assert not missing, f"folders without __init__.py (left out of the wheel): {sorted(missing)}"


def test_mapped_folders_are_relative_links_in_sglang():
    """A relative link survives a clone or a copy of the checkout to another place."""
    for folder, package_root in mapped_folders().items():
        if folder == "sglang":
            continue
        link = ROOT / "sglang" / folder
        assert link.is_symlink(), f"sglang/{folder} is not a link, so {package_root} is not {folder}/"
        assert os.readlink(link) == f"../{folder}", f"sglang/{folder} points at {os.readlink(link)}, not ../{folder}"


def test_every_module_belongs_to_a_package_setup_finds(setup_kwargs):
    packages = set(setup_kwargs["packages"])
    assert setup_kwargs["package_dir"] == {"": "."}, "setup.py maps packages to other folders than their paths"
    orphans = []
    for folder, package_root in mapped_folders().items():
        for relative in module_files(folder):
            if package_of(package_root, relative) not in packages:
                orphans.append(f"{folder}/{relative.as_posix()}")
    assert not orphans, f"modules setup.py would not ship: {orphans}"


def test_editable_install_is_a_plain_path_entry():
    """An editable install adds the checkout to `sys.path` through a .pth line, with no import hook.

    Static tools read .pth path entries but cannot run a hook (setuptools writes one, a
    `__editable___*_finder.py`, when packages live elsewhere than their dotted paths say).
    """
    # The checkout's own `sglang_hal.egg-info` (a build by-product) is a distribution too; the
    # installed one is the one pip recorded a direct_url.json for.
    editable = [
        dist
        for dist in metadata.distributions(name="sglang-hal")
        if json.loads(dist.read_text("direct_url.json") or "{}").get("dir_info", {}).get("editable")
    ]
    if not editable:
        pytest.skip("sglang-hal is not installed in editable mode here")
    dist = editable[0]
    names = [Path(str(f)).name for f in dist.files or ()]
    assert not [n for n in names if n.endswith("_finder.py")], f"the editable install has an import hook: {names}"
    pth = [f for f in dist.files or () if str(f).endswith(".pth")]
    assert len(pth) == 1, f"expected one .pth among {names}"
    entries = [line for line in Path(pth[0].locate()).read_text().splitlines() if line.strip()]
    assert [Path(e).resolve() for e in entries] == [ROOT], f"{pth[0]} holds {entries}, not the checkout"
