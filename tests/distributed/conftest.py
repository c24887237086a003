"""Tensor-parallel tests: ranks are real processes joined over gloo on loopback."""

from __future__ import annotations

import sys
from pathlib import Path

# The e2e server helper is a package-less module in a sibling folder; spawned rank processes
# inherit this path.
_TESTS = Path(__file__).resolve().parents[1]
for folder in (_TESTS / "e2e",):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
