"""Makes `tests/` importable, for the shared device parametrization in `tests/conformance.py`."""

import sys
from pathlib import Path

# pytest puts only this (package-less) directory on sys.path; the shared module lives one up.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
