"""The session registry (`runtime/processes/sessions.py`), as upstream's session controller
assembles a turn's prompt: the continued turn's prompt and output (its first max_new_tokens),
cut at `offset` or without the output, then the new prompt less a leading BOS; `replace` drops
(and aborts) turns; a streaming session continues its last completed turn only."""

from __future__ import annotations

import pytest

from sglang.runtime.processes.sessions import Sessions
from sglang.runtime.requests.errors import InvalidRequestError
from sglang.runtime.requests.session_params import SessionParams

BOS = 1


def _turn(
    sessions: Sessions, params: SessionParams, rid: str, new_ids: list[int], output: list[int], **kw
) -> list[int]:
    """Runs one turn to its end: its prompt, then `output` (completed unless told otherwise)."""
    prompt = sessions.prompt(params, new_ids, BOS)
    sessions.start(params, rid, prompt, kw.get("max_new_tokens"))
    sessions.finish(params, rid, output, kw.get("completed", True))
    return prompt


def test_turns_continue_by_rid_with_offset_and_without_output() -> None:
    sessions = Sessions(abort=lambda rid: None)
    sid = sessions.open(None)
    assert _turn(sessions, SessionParams(sid), "a", [BOS, 10, 11], [20, 21, 22], max_new_tokens=2) == [BOS, 10, 11]
    follow = SessionParams(sid, rid="a")
    assert sessions.prompt(follow, [BOS, 30], BOS) == [BOS, 10, 11, 20, 21, 30]  # output cut at max_new_tokens
    assert sessions.prompt(SessionParams(sid, rid="a", offset=2), [30], BOS) == [BOS, 10, 30]
    assert sessions.prompt(SessionParams(sid, rid="a", drop_previous_output=True), [30], BOS) == [BOS, 10, 11, 30]
    assert sessions.prompt(SessionParams(sid), [BOS, 5], BOS) == [BOS, 5]  # no rid: afresh


def test_refusals() -> None:
    sessions = Sessions(abort=lambda rid: None)
    sid = sessions.open("s1")
    with pytest.raises(InvalidRequestError, match="already open"):
        sessions.open("s1")
    with pytest.raises(InvalidRequestError, match="does not exist"):
        sessions.prompt(SessionParams("nope"), [5], BOS)
    with pytest.raises(InvalidRequestError, match="not a turn"):
        sessions.prompt(SessionParams(sid, rid="zz"), [5], BOS)
    sessions.start(SessionParams(sid), "running", [5, 6], 4)
    with pytest.raises(InvalidRequestError, match="has not finished"):
        sessions.prompt(SessionParams(sid, rid="running"), [7], BOS)
    sessions.close(sid)
    with pytest.raises(InvalidRequestError, match="does not exist"):
        sessions.prompt(SessionParams(sid), [5], BOS)
    sessions.close(sid)  # closing twice is no error, as upstream


def test_replace_drops_later_turns_and_aborts_the_running_ones() -> None:
    aborted: list[str] = []
    sessions = Sessions(abort=aborted.append)
    sid = sessions.open(None)
    _turn(sessions, SessionParams(sid), "a", [10], [11])
    _turn(sessions, SessionParams(sid, rid="a"), "b", [12], [13])
    sessions.start(SessionParams(sid, rid="b"), "c", sessions.prompt(SessionParams(sid, rid="b"), [14], BOS), None)
    replace = SessionParams(sid, rid="a", replace=True)
    assert _turn(sessions, replace, "b2", [15], [16]) == [10, 11, 15]
    assert aborted == ["c"]  # b finished; c was still running
    with pytest.raises(InvalidRequestError, match="not a turn"):
        sessions.prompt(SessionParams(sid, rid="b"), [1], BOS)
    assert sessions.prompt(SessionParams(sid, rid="b2"), [17], BOS) == [10, 11, 15, 16, 17]
    _turn(sessions, SessionParams(sid, replace=True), "fresh", [40], [41])  # no rid: every turn dropped
    with pytest.raises(InvalidRequestError, match="not a turn"):
        sessions.prompt(SessionParams(sid, rid="a"), [1], BOS)


def test_streaming_session_continues_its_last_completed_turn() -> None:
    sessions = Sessions(abort=lambda rid: None)
    sid = sessions.open(None, streaming=True)
    params = SessionParams(sid)
    assert _turn(sessions, params, "a", [10], [11]) == [10]
    sessions.start(params, "b", sessions.prompt(params, [12], BOS), None)
    with pytest.raises(InvalidRequestError, match="in flight"):
        sessions.prompt(params, [13], BOS)
    sessions.finish(params, "b", [99], completed=False)  # aborted: the session stays at turn a
    assert _turn(sessions, params, "c", [BOS, 14], [15]) == [10, 11, 14]
    assert sessions.prompt(params, [16], BOS) == [10, 11, 14, 15, 16]
    with pytest.raises(InvalidRequestError, match="streaming sessions take no"):
        sessions.prompt(SessionParams(sid, offset=1), [16], BOS)


def test_idle_sessions_close_after_their_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr("sglang.runtime.processes.sessions.time.monotonic", lambda: now[0])
    sessions = Sessions(abort=lambda rid: None)
    sid = sessions.open(None, timeout=5)
    kept = sessions.open(None)
    now[0] += 6
    with pytest.raises(InvalidRequestError, match="does not exist"):
        sessions.prompt(SessionParams(sid), [1], BOS)
    assert sessions.prompt(SessionParams(kept), [1], BOS) == [1]


def test_replacing_a_running_turn_continues_its_output_so_far() -> None:
    aborted: list[str] = []
    sessions = Sessions(abort=aborted.append)
    sid = sessions.open(None)
    _turn(sessions, SessionParams(sid), "a", [10], [11])
    running = SessionParams(sid, rid="a")
    sessions.start(running, "b", sessions.prompt(running, [12], BOS), None)
    sessions.progress(running, "b", [13, 14])
    replace = SessionParams(sid, rid="b", replace=True)
    assert sessions.prompt(replace, [15], BOS) == [10, 11, 12, 13, 14, 15]
    sessions.start(replace, "c", sessions.prompt(replace, [15], BOS), None)
    assert aborted == ["b"]
