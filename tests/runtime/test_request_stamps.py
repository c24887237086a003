"""Per-request stage stamps (`SGLANG_REQUEST_STAMPS`): each stage is stamped once per request on
its first output's path, in order; an HTTP request's arrival and first byte are tied to the
engine ids it started; with stamps off nothing is written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglang.runtime.observability import request_stamps
from sglang.runtime.observability.request_stamps import HTTP_CLOCK, HttpClock, StampWriter, stamp_generate_called

from .runtime_harness import Runtime, make_request


def read(path: Path) -> list[tuple[str, str, int]]:
    return [(r["rid"], r["stage"], r["ns"]) for r in map(json.loads, path.read_text().splitlines())]


def test_http_clock_ties_rids_and_stamps_the_first_byte_once(tmp_path: Path) -> None:
    writer = StampWriter(str(tmp_path / "stamps.jsonl"))
    clock = HttpClock(received_ns=123)
    token = HTTP_CLOCK.set(clock)
    try:
        stamp_generate_called(writer, "a")
        stamp_generate_called(writer, "b")
    finally:
        HTTP_CLOCK.reset(token)
    clock.body_sent(writer)
    clock.body_sent(writer)  # later chunks: no stamp
    stamps = read(tmp_path / "stamps.jsonl")
    assert [(rid, stage) for rid, stage, _ in stamps] == [
        ("a", "http_received"),
        ("a", "generate_called"),
        ("b", "http_received"),
        ("b", "generate_called"),
        ("a", "first_byte_sent"),
        ("b", "first_byte_sent"),
    ]
    assert stamps[0][2] == 123 and stamps[2][2] == 123
    assert stamps[1][2] > 123


def test_scheduler_stamps_each_request_first_step_only(
    rt: Runtime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "stamps.jsonl"
    monkeypatch.setattr(request_stamps, "STAMPS", StampWriter(str(path)))
    prompt = rt.tokenizer.encode("Name three colours.")
    rt.run([make_request(prompt, rid="streamed", stream=True, max_new_tokens=4, ignore_eos=True)])
    stamps = read(path)
    stages = [stage for _, stage, _ in stamps]
    assert stages == ["forward_started", "forward_ended", "sampled", "step_ended"]  # not for the 3 decode steps
    times = [ns for _, _, ns in stamps]
    assert times == sorted(times) and all(rid == "streamed" for rid, _, _ in stamps)


def test_no_stamps_without_the_environment_variable(rt: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(request_stamps, "STAMPS", None)
    monkeypatch.setattr(StampWriter, "stamp", lambda *a, **k: pytest.fail("stamped while off"))
    rt.run([make_request(rt.tokenizer.encode("Hi"), stream=True, max_new_tokens=2)])
