"""The step profiler behind `/start_profile` and `/stop_profile`, without a server: upstream's
request fields, when a profile starts and ends, what its trace holds, and what it refuses. The
routes and `Engine.start_profile` over a real scheduler are in tests/e2e/test_upstream_fields.py
and tests/runtime/test_engine.py."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import torch

from sglang.runtime.observability.step_profiler import ProfileError, ProfileSettings, StepProfiler


def trace_names(path: Path) -> set[str]:
    with gzip.open(path, "rt") as f:
        return {event.get("name", "") for event in json.load(f)["traceEvents"]}


def run_steps(profiler: StepProfiler, count: int, size: int) -> None:
    """`count` model steps, each one matmul of `size` x `size` (its shape tells the steps apart)."""
    for _ in range(count):
        torch.ones(size, size) @ torch.ones(size, size)
        profiler.step_done()


def test_settings_take_upstream_fields() -> None:
    # What `python -m sglang.profiler` posts: step counts as strings, its unsupported switches off.
    body = {"output_dir": "/x", "num_steps": "5", "start_step": "2", "activities": ["CPU"], "merge_profiles": False}
    assert ProfileSettings.from_json({**body, "profile_by_stage": False, "req_type": 0}) == ProfileSettings(
        output_dir="/x", num_steps=5, start_step=2, activities=("CPU",)
    )
    assert ProfileSettings.from_json({"with_stack": None}) == ProfileSettings()
    for bad, words in (
        ({"num_steps": -1}, "num_steps"),
        ({"num_steps": "two"}, "num_steps"),
        ({"num_steps": True}, "num_steps"),
        ({"activities": "CPU"}, "activities"),
        ({"with_stack": "yes"}, "with_stack"),
        ({"output_dir": 3}, "output_dir"),
        ({"profile_by_stage": True}, "profile_by_stage is not supported"),
        ({"steps": 3}, "unknown field"),
    ):
        with pytest.raises(ProfileError, match=words):
            ProfileSettings.from_json(bad)


def test_num_steps_records_those_steps_and_writes_the_trace(tmp_path: Path) -> None:
    profiler = StepProfiler(device_activity=None)
    run_steps(profiler, 2, size=3)
    profiler.start(ProfileSettings(output_dir=str(tmp_path), num_steps=2, profile_id="p", profile_prefix="run"))
    assert profiler.active
    run_steps(profiler, 2, size=5)
    assert not profiler.active  # stopped by itself after its two steps
    (trace,) = tmp_path.iterdir()
    assert trace.name == "run-p-TP-0.trace.json.gz"
    assert "aten::mm" in trace_names(trace)
    run_steps(profiler, 1, size=7)
    assert list(tmp_path.iterdir()) == [trace]  # nothing recorded after the profile ended


def test_start_step_waits_and_stop_ends_early(tmp_path: Path) -> None:
    profiler = StepProfiler(device_activity=None)
    profiler.start(ProfileSettings(output_dir=str(tmp_path), start_step=2, profile_id="late"))
    run_steps(profiler, 1, size=3)
    assert profiler.active and not list(tmp_path.iterdir())
    run_steps(profiler, 2, size=4)
    path = Path(profiler.stop())
    assert path.name == "late-TP-0.trace.json.gz" and path.exists()
    # A profile stopped before its start step came writes nothing.
    profiler.start(ProfileSettings(output_dir=str(tmp_path), start_step=100))
    assert profiler.stop() == "" and list(tmp_path.iterdir()) == [path]


def test_refusals(tmp_path: Path) -> None:
    profiler = StepProfiler(device_activity=None)
    with pytest.raises(ProfileError, match="not in progress"):
        profiler.stop()
    with pytest.raises(ProfileError, match="unknown profiler activities"):
        profiler.start(ProfileSettings(output_dir=str(tmp_path), activities=("CPU", "RPD")))
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(ProfileError, match="cannot write traces"):
        profiler.start(ProfileSettings(output_dir=str(blocker / "traces")))
    assert not profiler.active
    profiler.start(ProfileSettings(output_dir=str(tmp_path)))
    with pytest.raises(ProfileError, match="already in progress"):
        profiler.start(ProfileSettings(output_dir=str(tmp_path)))
    profiler.stop()
    assert not profiler.active
