"""Stored responses: what `previous_response_id`, retrieval, deletion and background requests
read, with `--enable-response-store` (upstream's flag; off by default, as there).

The store lives in the HTTP process's memory: a restart forgets it. Upstream's has no limit;
this one keeps the newest `capacity` responses and forgets the oldest beyond that (a response
chained to a forgotten one gets the same 404 as one to an unknown id), so a long-running server
does not grow without bound. Invariant: an entry's `conversation` is every chat message of its
turn and the turns it was chained to, its own answer last (instructions excluded), so the next
turn's prompt is exactly that history plus its own input.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from sglang.runtime.server.errors import ApiError

DEFAULT_CAPACITY = 10_000

DISABLED = "the response store is disabled: start the server with --enable-response-store to use {}"


@dataclass
class StoredResponse:
    response: dict[str, Any]
    """The response object as a retrieval returns it (updated when a background one finishes)."""
    conversation: list[dict[str, Any]]
    task: asyncio.Task[None] | None = None
    """A background response's generation while it runs."""


@dataclass
class ResponseStore:
    enabled: bool
    capacity: int = DEFAULT_CAPACITY
    entries: OrderedDict[str, StoredResponse] = field(default_factory=OrderedDict)

    def require(self, feature: str, param: str) -> None:
        if not self.enabled:
            raise ApiError(400, DISABLED.format(feature), param)

    def put(self, response_id: str, entry: StoredResponse) -> None:
        self.entries[response_id] = entry
        self.entries.move_to_end(response_id)
        while len(self.entries) > self.capacity:
            self.entries.popitem(last=False)

    def get(self, response_id: str, param: str = "response_id") -> StoredResponse:
        """The stored response; 404 (naming `param`) for an id it does not hold."""
        self.require("stored responses", param)
        entry = self.entries.get(response_id)
        if entry is None:
            raise ApiError(404, f"Response with id {response_id!r} not found.", param)
        return entry

    def delete(self, response_id: str) -> None:
        self.get(response_id)
        del self.entries[response_id]
