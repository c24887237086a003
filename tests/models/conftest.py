"""Fixtures for model parity: session-cached tiny checkpoints and the bound platform target."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# pytest puts only this (package-less) directory on sys.path; the shared `conformance` module
# (device parametrization) lives one up.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from model_harness import CheckpointStore, Target, TargetSpec, bound_ops


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> CheckpointStore:
    return CheckpointStore(tmp_path_factory.mktemp("hf-models"))


@pytest.fixture
def target(request: pytest.FixtureRequest) -> Iterator[Target]:
    """The platform of the (indirect) parameter with its ops bound; the previous binding is
    restored afterwards, so a forced-reference run does not leak into later tests."""
    spec: TargetSpec = request.param
    with bound_ops(spec) as bound:
        yield bound
