"""The repository's end-to-end tests share the shipped suite's fixtures (a real `sglang serve`
on a loopback port). Every test here and in the shipped e2e suite is marked `e2e`; run only
them with `pytest -m e2e`, or leave them out with `-m "not e2e"`."""

from __future__ import annotations

from pathlib import Path

import pytest

from sglang.ci.suites.e2e.fixtures import http, model_info, server, server_factory, tokenizer

__all__ = ["http", "model_info", "server", "server_factory", "tokenizer"]

E2E_DIRS = (Path(__file__).parent, Path(__file__).resolve().parents[2] / "ci" / "suites" / "e2e")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "e2e: end-to-end tests against a real `sglang serve` process")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if any(folder in item.path.parents for folder in E2E_DIRS):
            item.add_marker(pytest.mark.e2e)
