"""Upstream's sessions (`/open_session`, `/close_session`, `session_params` on /generate): a
multi-turn conversation whose next request continues an earlier one's tokens.

A session keeps, per request (a turn), the prompt it ran on and the output it produced, and the
turns continued from it. A new turn's prompt is the continued turn's prompt and output (its first
`max_new_tokens` output tokens, cut at `offset`, without the output when
`drop_previous_output`) followed by the new prompt, less a leading BOS token. That is all a
session needs here: the prefix cache finds the continued turn's KV by its tokens, so nothing is
recomputed, and the scheduler never hears of sessions. The registry lives on the tokenizer
manager's event loop (one thread, no locks).

Invariants: a turn is continued only once it has finished (a streaming session holds one turn
and runs one request at a time), except by `replace`, which aborts the continued turn's request
and those of the turns it drops (a replaced turn still running is continued from its prompt and
the output it had so far); an idle session past its `timeout` is closed at the next use of the
registry.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from sglang.runtime.requests.errors import InvalidRequestError
from sglang.runtime.requests.session_params import FIELD, SessionParams


@dataclass
class Turn:
    """One request of a session: its whole prompt, and its output once it has finished."""

    rid: str
    input_ids: list[int]
    max_new_tokens: int | None
    output_ids: list[int] = field(default_factory=list)
    finished: bool = False
    children: list[Turn] = field(default_factory=list)

    def sequence(self, with_output: bool) -> list[int]:
        return self.input_ids + self.output_ids[: self.max_new_tokens] if with_output else list(self.input_ids)


@dataclass
class Session:
    id: str
    streaming: bool
    timeout: float | None
    turns: dict[str, Turn] = field(default_factory=dict)
    """By rid; a streaming session's holds only its last completed turn."""
    running: Turn | None = None
    """A streaming session's request in flight."""
    last_active: float = 0.0
    """`time.monotonic()` at the session's last use."""


class Sessions:
    """The open sessions of a server. `abort(rid)` aborts a request in flight."""

    def __init__(self, abort: Callable[[str], object]) -> None:
        self.abort = abort
        self.open_sessions: dict[str, Session] = {}

    def open(self, session_id: str | None, streaming: bool = False, timeout: float | None = None) -> str:
        self._close_idle()
        session_id = session_id if session_id is not None else uuid.uuid4().hex
        if session_id in self.open_sessions:
            raise InvalidRequestError(f"session {session_id!r} is already open", "session_id")
        self.open_sessions[session_id] = Session(session_id, streaming, timeout, last_active=time.monotonic())
        return session_id

    def close(self, session_id: str) -> None:
        """Forgets the session; its requests in flight run to their end."""
        self.open_sessions.pop(session_id, None)

    def prompt(self, params: SessionParams, new_ids: list[int], bos_token_id: int | None) -> list[int]:
        """The whole prompt of a new turn (see the module's docstring); changes nothing. Raises
        InvalidRequestError for a session or turn that cannot be continued."""
        session = self._session(params)
        base = self._continued(session, params)
        if base is None:
            return list(new_ids)
        if bos_token_id is not None and new_ids[:1] == [bos_token_id]:
            new_ids = new_ids[1:]
        sequence = base.sequence(with_output=not params.drop_previous_output)
        ids = (sequence[: params.offset] if params.offset else sequence) + list(new_ids)
        if not ids:
            raise InvalidRequestError("a session request must contain input tokens after restoring history", FIELD)
        return ids

    def start(self, params: SessionParams, rid: str, input_ids: list[int], max_new_tokens: int | None) -> None:
        """Records the turn `rid`, about to run on `input_ids` (`prompt`'s result), and drops
        what `replace` drops. Raises InvalidRequestError when the session changed since `prompt`."""
        session = self._session(params)
        base = self._continued(session, params)
        turn = Turn(rid, list(input_ids), max_new_tokens)
        if session.streaming:
            session.running = turn
            return
        if params.replace:
            dropped = base.children if base is not None else list(session.turns.values())
            for old in dropped:
                self._drop(session, old)
            if base is not None:
                base.children = []
                if not base.finished:
                    self.abort(base.rid)
        if base is not None:
            base.children.append(turn)
        session.turns[rid] = turn

    def progress(self, params: SessionParams, rid: str, output_ids: list[int]) -> None:
        """Turn `rid`'s output so far (what a `replace` of it while it runs continues)."""
        turn = self._turn(params, rid)
        if turn is not None:
            turn.output_ids = output_ids

    def finish(self, params: SessionParams, rid: str, output_ids: list[int], completed: bool) -> None:
        """Records turn `rid`'s output; `completed`: it ended by its own stop rule (an aborted
        request leaves a streaming session at its previous turn)."""
        turn = self._turn(params, rid)
        if turn is None:
            return
        turn.output_ids, turn.finished = list(output_ids), True
        session = self.open_sessions[params.id]
        if session.streaming:
            session.running = None
            if completed:
                session.turns = {rid: turn}

    def _turn(self, params: SessionParams, rid: str) -> Turn | None:
        """Turn `rid` of an open session, if it is one (its session may have closed meanwhile)."""
        session = self.open_sessions.get(params.id)
        if session is None:
            return None
        turn = session.running if session.streaming else session.turns.get(rid)
        return turn if turn is not None and turn.rid == rid else None

    def _session(self, params: SessionParams) -> Session:
        self._close_idle()
        session = self.open_sessions.get(params.id)
        if session is None:
            raise InvalidRequestError(f"session id {params.id} does not exist", f"{FIELD}.id")
        session.last_active = time.monotonic()
        return session

    def _continued(self, session: Session, params: SessionParams) -> Turn | None:
        """The turn a request of `params` continues (None: none, it starts afresh)."""
        if session.streaming:
            if params.replace or params.offset or params.drop_previous_output:
                raise InvalidRequestError("streaming sessions take no replace, offset or drop_previous_output", FIELD)
            if session.running is not None:
                raise InvalidRequestError("the streaming session already has a request in flight", FIELD)
            return next(iter(session.turns.values()), None)
        if params.rid is None:
            return None
        turn = session.turns.get(params.rid)
        if turn is None:
            raise InvalidRequestError(f"request {params.rid!r} is not a turn of session {session.id}", f"{FIELD}.rid")
        if not turn.finished and not params.replace:
            raise InvalidRequestError(f"request {params.rid!r} of the session has not finished", f"{FIELD}.rid")
        return turn

    def _drop(self, session: Session, turn: Turn) -> None:
        for child in turn.children:
            self._drop(session, child)
        if not turn.finished:
            self.abort(turn.rid)
        session.turns.pop(turn.rid, None)

    def _close_idle(self) -> None:
        now = time.monotonic()
        for session in list(self.open_sessions.values()):
            if session.timeout is not None and now - session.last_active > session.timeout:
                del self.open_sessions[session.id]
