"""Fixtures the model-parity suite (and the repository's model tests) share: session-cached tiny
checkpoints and the platform target with its kernels bound. conftest files import them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sglang.ci.suites.model_harness import CheckpointStore, Target, TargetSpec, bound_ops


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> CheckpointStore:
    return CheckpointStore(tmp_path_factory.mktemp("hf-models"))


@pytest.fixture
def target(request: pytest.FixtureRequest) -> Iterator[Target]:
    """The platform of the (indirect) parameter; the kernels `load_model` binds for it are
    undone afterwards, so a forced-reference run does not leak into later tests."""
    spec: TargetSpec = request.param
    with bound_ops(spec) as bound:
        yield bound
