"""Why a request ended: a typed value inside the runtime, SGLang's dictionary at the user edge."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

BAD_REQUEST_STATUS = 400
"""An abort's status when the request itself asked for what could not be done."""


@dataclass(frozen=True)
class FinishReason:
    """One of three kinds, each with its own fields (the others stay None):

    - `stop`: `matched` is the stop token id, stop string or stop_regex pattern that ended the
      output, or None (a grammar that terminated);
    - `length`: `length` is the number of output tokens when `max_new_tokens` or the context ran out;
    - `abort`: `message` says why, `status_code` is the HTTP status the answer carries (400 for
      what the request asked, 5xx for a failure of ours).
    """

    kind: Literal["stop", "length", "abort"]
    matched: int | str | None = None
    length: int | None = None
    message: str | None = None
    status_code: int | None = None

    @classmethod
    def stop(cls, matched: int | str | None) -> FinishReason:
        return cls("stop", matched=matched)

    @classmethod
    def of_length(cls, length: int) -> FinishReason:
        return cls("length", length=length)

    @classmethod
    def abort(cls, message: str, status_code: int = BAD_REQUEST_STATUS) -> FinishReason:
        return cls("abort", message=message, status_code=status_code)

    def to_json(self) -> dict[str, Any]:
        """Upstream SGLang's shapes: `{"type": "stop", "matched": ...}`, `{"type": "length",
        "length": n}`, `{"type": "abort", "message": ..., "status_code": ...}`."""
        if self.kind == "stop":
            return {"type": "stop", "matched": self.matched}
        if self.kind == "length":
            return {"type": "length", "length": self.length}
        return {"type": "abort", "message": self.message, "status_code": self.status_code}
