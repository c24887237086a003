"""Shared fixtures of the frontend tests: no test leaks a default backend into the next."""

from __future__ import annotations

import pytest

from sglang.frontend.config import global_config


@pytest.fixture(autouse=True)
def _reset_default_backend():
    saved = global_config.default_backend
    yield
    global_config.default_backend = saved
