"""Fixtures of the client tests: third-party clients (upstream SGLang's frontend, smg,
sglang-router, the anthropic and ollama clients, litellm), each in a cached venv of its own,
against real `sglang serve` processes on loopback.

The venvs are built on first use (about a minute and a half cold for upstream's frontend, whose
package imports torch; seconds for the routers) and then found in the cache (venvs.py). The
figures each test records (venv times, request counts, per-worker splits) are printed in the
terminal summary, under "client tests: figures".
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sglang.ci.servers import ServerGroup

from .venvs import (
    ANTHROPIC_CLIENT,
    LITELLM,
    OLLAMA_CLIENT,
    SGLANG_ROUTER,
    SMG,
    UPSTREAM_FRONTEND,
    Venv,
    VenvSpec,
    ensure_venv,
)

FIGURES = pytest.StashKey[dict[str, str]]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[FIGURES] = {}


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    figures = config.stash.get(FIGURES, {})
    if figures:
        terminalreporter.write_sep("=", "client tests: figures")
        for key, value in figures.items():
            terminalreporter.write_line(f"{key}: {value}")


@pytest.fixture(scope="session")
def figures(pytestconfig: pytest.Config) -> dict[str, str]:
    """Figures to print at the end of the session (key -> one line)."""
    return pytestconfig.stash[FIGURES]


def _venv(spec: VenvSpec, figures: dict[str, str]) -> Venv:
    venv = ensure_venv(spec)
    if venv.built:
        steps = ", ".join(f"{step} {seconds:.1f} s" for step, seconds in venv.steps.items())
        figures[f"venv {spec.name}"] = f"built in {venv.seconds:.1f} s ({steps}) at {venv.path}"
    else:
        figures[f"venv {spec.name}"] = f"cached, {venv.seconds:.2f} s, at {venv.path}"
    return venv


@pytest.fixture(scope="session")
def upstream_venv(figures: dict[str, str]) -> Venv:
    return _venv(UPSTREAM_FRONTEND, figures)


@pytest.fixture(scope="session")
def smg_venv(figures: dict[str, str]) -> Venv:
    return _venv(SMG, figures)


@pytest.fixture(scope="session")
def router_venv(figures: dict[str, str]) -> Venv:
    return _venv(SGLANG_ROUTER, figures)


@pytest.fixture(scope="session")
def anthropic_client_venv(figures: dict[str, str]) -> Venv:
    return _venv(ANTHROPIC_CLIENT, figures)


@pytest.fixture(scope="session")
def ollama_client_venv(figures: dict[str, str]) -> Venv:
    return _venv(OLLAMA_CLIENT, figures)


@pytest.fixture(scope="session")
def litellm_venv(figures: dict[str, str]) -> Venv:
    return _venv(LITELLM, figures)


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerGroup]:
    """Starts processes for one test module and stops them all when it ends, passed or failed."""
    with ServerGroup(tmp_path_factory.mktemp("clients")) as group:
        yield group
