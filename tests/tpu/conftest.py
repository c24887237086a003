"""The tpu tests run the tpu platform on XLA:CPU (`JAX_PLATFORMS=cpu`) unless a TPU is present;
they are skipped, with the reason, when jax or torchax is not installed (the `[tpu]` extra).

`JAX_PLATFORMS=cpu` is set per test (monkeypatch), not for the session, so the rest of a run
never sees the tpu platform as available; JAX itself uses only its CPU backend on a machine
without accelerators either way.
"""

from __future__ import annotations

import importlib.util

import pytest

MISSING = [p for p in ("jax", "torchax") if importlib.util.find_spec(p) is None]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not MISSING:
        return
    skip = pytest.mark.skip(reason=f"{', '.join(MISSING)} not installed (pip install -e '.[tpu]')")
    for item in items:
        if "tests/tpu/" in str(item.path):
            item.add_marker(skip)


@pytest.fixture
def xla_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tpu platform on XLA:CPU for this test."""
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
