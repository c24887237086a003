"""Upstream's `session_params` of a /generate prompt: which turn of an open session it continues.

`id` names the session (`/open_session`). In a session opened without `streaming`, `rid` names
the earlier request to continue (None: start afresh), `replace` first aborts that request's
later turns (and, without `rid`, every turn), `offset` cuts the continued sequence (its prompt,
then its output) at that token before the new prompt is appended, and `drop_previous_output`
leaves the continued request's output out. A streaming session always continues its last turn
and takes none of the four.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from sglang.runtime.requests.errors import InvalidRequestError

FIELD = "session_params"


@dataclass(frozen=True)
class SessionParams:
    id: str
    rid: str | None = None
    offset: int | None = None
    replace: bool = False
    drop_previous_output: bool = False

    @classmethod
    def from_json(cls, value: Any) -> SessionParams | None:
        """The parsed object; None when there is none or it names no session (as upstream, a
        request without a session id is an ordinary one). Raises InvalidRequestError."""
        if value is None:
            return None
        if not isinstance(value, dict):
            raise InvalidRequestError(f"{FIELD} must be an object", FIELD)
        unknown = set(value) - {f.name for f in fields(cls)}
        if unknown:
            raise InvalidRequestError(f"{FIELD}: unknown field(s) {', '.join(sorted(unknown))}", FIELD)
        if value.get("id") is None:
            return None
        for name in ("id", "rid"):
            if value.get(name) is not None and not isinstance(value[name], str):
                raise InvalidRequestError(f"{FIELD}.{name} must be a string", f"{FIELD}.{name}")
        offset = value.get("offset")
        if offset is not None and type(offset) is not int:
            raise InvalidRequestError(f"{FIELD}.offset must be an integer", f"{FIELD}.offset")
        for name in ("replace", "drop_previous_output"):
            if value.get(name) is not None and not isinstance(value[name], bool):
                raise InvalidRequestError(f"{FIELD}.{name} must be a boolean", f"{FIELD}.{name}")
        return cls(
            value["id"],
            value.get("rid"),
            offset,
            bool(value.get("replace")),
            bool(value.get("drop_previous_output")),
        )
