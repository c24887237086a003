"""The engine's children get a bounded OpenMP spin unless the user chose one (why: the
module docstring of runtime/processes/openmp_spin.py)."""

from __future__ import annotations

import multiprocessing as mp
import os
from pathlib import Path

import pytest

from sglang.runtime.processes import launch
from sglang.runtime.processes.openmp_spin import CHILD_SPIN_COUNT, SPIN_ENV, WAIT_POLICY_ENV


def _child_spin_count(tmp_path: Path) -> str:
    """What a child started the way the engine starts its children sees in its environment."""
    out = tmp_path / "spin"
    process = mp.get_context("spawn").Process(target=os.system, args=(f'printf "%s" "${SPIN_ENV}" > {out}',))
    launch._start(process)
    process.join(30)
    assert process.exitcode == 0
    return out.read_text()


def test_children_spin_briefly_and_the_parent_is_untouched(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv(SPIN_ENV, raising=False)
    monkeypatch.delenv(WAIT_POLICY_ENV, raising=False)
    assert _child_spin_count(tmp_path) == CHILD_SPIN_COUNT
    assert SPIN_ENV not in os.environ


@pytest.mark.parametrize("variable", [SPIN_ENV, WAIT_POLICY_ENV])
def test_a_users_choice_is_left_alone(tmp_path, monkeypatch, variable) -> None:
    monkeypatch.delenv(SPIN_ENV, raising=False)
    monkeypatch.delenv(WAIT_POLICY_ENV, raising=False)
    monkeypatch.setenv(variable, "123" if variable == SPIN_ENV else "active")
    assert _child_spin_count(tmp_path) == ("123" if variable == SPIN_ENV else "")
