"""Maps the design card's top-level folders onto subpackages of `sglang`.

`frontend/` installs as `sglang.frontend`, `runtime/` as `sglang.runtime`, and so on, so that
nothing installs a generic top-level module like `runtime` or `ops`.
"""

from setuptools import find_packages, setup

SUBPACKAGES = ("frontend", "runtime", "ops", "platforms", "ci")


def _packages() -> tuple[list[str], dict[str, str]]:
    packages = ["sglang", *(f"sglang.{p}" for p in find_packages("sglang"))]
    package_dir = {"sglang": "sglang"}
    for folder in SUBPACKAGES:
        root = f"sglang.{folder}"
        package_dir[root] = folder
        packages.append(root)
        packages.extend(f"{root}.{p}" for p in find_packages(folder))
    return packages, package_dir


packages, package_dir = _packages()
setup(packages=packages, package_dir=package_dir)
