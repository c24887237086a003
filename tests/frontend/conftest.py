"""Shared fixtures of the frontend tests: no test leaks a default backend into the next, and the
slow end-to-end tests run only when `-m` selects them."""

from __future__ import annotations

import pytest

from sglang.frontend.config import global_config


@pytest.fixture(autouse=True)
def _reset_default_backend():
    saved = global_config.default_backend
    yield
    global_config.default_backend = saved


def pytest_collection_modifyitems(config, items):
    if "slow" in (config.getoption("-m") or ""):
        return
    skip = pytest.mark.skip(reason="slow: starts a server; run with -m slow")
    for item in items:
        if "frontend" in item.path.parts and item.get_closest_marker("slow"):
            item.add_marker(skip)
