"""Adaptive draft length (`--speculative-adaptive`): how many tokens to draft for each request's
next verify step, from how its last verify step went.

A verify step of `d` drafts costs about `d + 1` rows of the target (on a CPU, where a row's
matmuls are compute-bound, close to `d + 1` decode steps once the rows leave the few-row kernels),
so drafts that are rejected are paid for. Each request starts at `START` drafts (or the cap, if
smaller); a step that accepts every draft doubles its length, up to the cap (upstream's
`--speculative-num-draft-tokens` minus the last token); a step that rejects one sets it to the
accepted run plus one, so a request whose drafts keep missing drafts one token a step.

Invariants: every limit lies in `[1, cap]`; a request's state is dropped when it finishes.
"""

from __future__ import annotations

START = 4
"""Drafts a request's first verify step checks (when the cap allows)."""


class AdaptiveDraftLength:
    def __init__(self, cap: int) -> None:
        if cap < 1:
            raise ValueError(f"the draft cap must be at least 1, got {cap}")
        self.cap = cap
        self.limits: dict[str, int] = {}

    def limit(self, rid: str) -> int:
        """Drafts the request `rid` may check in its next verify step."""
        return self.limits.get(rid, min(START, self.cap))

    def observe(self, rid: str, drafted: int, accepted: int) -> None:
        """`rid`'s verify step checked `drafted` drafts and accepted the first `accepted`."""
        if drafted < 1:
            return
        grown = min(self.cap, 2 * drafted) if accepted >= drafted else accepted + 1
        self.limits[rid] = max(1, min(self.cap, grown))

    def release(self, rid: str) -> None:
        self.limits.pop(rid, None)
