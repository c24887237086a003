"""Frontend programs (`programs.PROGRAMS`) through `sgl.RuntimeEndpoint` against the device's server.

The programs are written as upstream SGLang users write them; each check asserts what its
programs must produce on the embedded model. Programs that need a feature the native endpoint
lacks (API speculation, measured through an API backend's token usage) are not run here; heavy
programs run under `-m slow`; `CORE_PROGRAMS` are in the `e2e_core` subset.
"""

from __future__ import annotations

from typing import Any

import pytest

import sglang as sgl
from sglang.ci.servers import RunningServer
from sglang.ci.suites.programs import PROGRAMS, Feature, ProgramCase

CORE_PROGRAMS = frozenset({"few_shot_qa", "select", "stream"})
"""The programs of the `e2e_core` subset: generation, choice scoring and streaming, in few batch shapes."""


def _marks(case: ProgramCase) -> list[pytest.MarkDecorator]:
    marks = [pytest.mark.slow] if case.heavy else []
    return [*marks, pytest.mark.e2e_core] if case.name in CORE_PROGRAMS else marks


ENDPOINT_CASES = [
    pytest.param(case, id=case.name, marks=_marks(case)) for case in PROGRAMS if Feature.API_SPEC not in case.needs
]


@pytest.fixture
def endpoint(server: RunningServer) -> Any:
    backend = sgl.RuntimeEndpoint(server.url, api_key=server.api_key)
    previous = sgl.global_config.default_backend
    sgl.set_default_backend(backend)
    yield backend
    sgl.global_config.default_backend = previous


@pytest.mark.parametrize("case", ENDPOINT_CASES)
def test_program(case: ProgramCase, endpoint: Any) -> None:
    case.check()
