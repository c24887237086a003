"""Fixtures of the prefill-decode tests: a module's process group and smg 1.13 in its own venv
(the client tests' cached venv, `tests/clients/venvs.py`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sglang.ci.servers import ServerGroup

from ..clients.venvs import SMG, Venv, ensure_venv


@pytest.fixture(scope="session")
def smg_venv() -> Venv:
    return ensure_venv(SMG)


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerGroup]:
    """Starts processes for one test module and stops them all when it ends, passed or failed."""
    with ServerGroup(tmp_path_factory.mktemp("pd")) as group:
        yield group
