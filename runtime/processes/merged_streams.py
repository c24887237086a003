"""Several async streams read as one: every item, tagged with its stream's index, as it arrives.

Used wherever one response carries several generations: a streamed batch or n > 1 on the
native API (the tokenizer manager), the choices of an OpenAI stream. The first error of any
stream is raised; closing or cancelling the merged iterator cancels every stream, whose own
`finally` then aborts its request, so no generation outlives the reader.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

Event = tuple[int, dict[str, Any]]
"""(the stream's index, its next item)."""


def merged(streams: list[AsyncIterator[dict[str, Any]]]) -> AsyncIterator[Event]:
    """The items of all `streams` as they arrive, tagged with the stream's index. One stream
    (the usual one-choice request) is read directly: no pump task, no queue, so each item
    reaches the reader one event-loop hop sooner."""
    return _tagged(streams[0]) if len(streams) == 1 else _pumped(streams)


_END = object()


async def _tagged(stream: AsyncIterator[dict[str, Any]]) -> AsyncIterator[Event]:
    async with aclosing(stream):  # type: ignore[type-var]  (the manager's streams are generators)
        async for item in stream:
            yield 0, item


async def _pumped(streams: list[AsyncIterator[dict[str, Any]]]) -> AsyncIterator[Event]:
    queue: asyncio.Queue[tuple[int, Any]] = asyncio.Queue()

    async def pump(index: int, stream: AsyncIterator[dict[str, Any]]) -> None:
        try:
            async for item in stream:
                queue.put_nowait((index, item))
            queue.put_nowait((index, _END))
        except Exception as e:
            queue.put_nowait((index, e))

    tasks = [asyncio.create_task(pump(i, s)) for i, s in enumerate(streams)]
    try:
        running = len(tasks)
        while running:
            index, item = await queue.get()
            if item is _END:
                running -= 1
            elif isinstance(item, Exception):
                raise item
            else:
                yield index, item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
