"""Every module under the folders setup.py maps onto `sglang.*` belongs to a package it finds.

setup.py lists packages with `find_packages`, which only sees folders that have an `__init__.py`
(and whose parents all have one). A folder without it is silently left out of the wheel, while an
editable install still imports it as a namespace package, so only this check catches it cheaply.
"""

from __future__ import annotations

import runpy
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


def test_every_module_belongs_to_a_package_setup_finds(setup_kwargs):
    packages = set(setup_kwargs["packages"])
    package_dir = setup_kwargs["package_dir"]
    orphans = []
    for folder, package_root in mapped_folders().items():
        assert package_dir.get(package_root) == folder, (
            f"setup.py maps {package_root} to {package_dir.get(package_root)}"
        )
        for relative in module_files(folder):
            if package_of(package_root, relative) not in packages:
                orphans.append(f"{folder}/{relative.as_posix()}")
    assert not orphans, f"modules setup.py would not ship: {orphans}"
