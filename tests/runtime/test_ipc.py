"""The engine's message helpers: every message arrives once, in order, however it was queued.

`read_as_they_come` hands a synchronous socket's messages to a callback from the event loop;
ZeroMQ's descriptor signals edges, so messages queued before the reader starts, and bursts
between two wake-ups, must all be drained. `recv_some` waits for one message and takes the rest.
"""

from __future__ import annotations

import asyncio
import threading

import zmq

from sglang.runtime.processes import ipc


def _sockets() -> tuple[zmq.Context, zmq.Socket, zmq.Socket]:
    endpoints = ipc.Endpoints.fresh()
    ctx = zmq.Context()
    reader = ipc.pull(ctx, endpoints.tokenizer)
    writer = ipc.push(ctx, endpoints.tokenizer)
    return ctx, reader, writer


def test_the_reader_delivers_queued_messages_and_bursts_in_order() -> None:
    ctx, reader, writer = _sockets()
    received: list[int] = []

    async def scenario() -> None:
        for i in range(5):  # queued before the reader starts: no edge will announce them
            ipc.send(writer, i)
        await asyncio.sleep(0.05)
        stop = ipc.read_as_they_come(reader, received.append)
        assert received == [0, 1, 2, 3, 4]
        for burst in range(20):
            for i in range(burst):
                ipc.send(writer, 100 * burst + i)
            await asyncio.sleep(0.001 * (burst % 3))
        for _ in range(200):
            if len(received) == 5 + sum(range(20)):
                break
            await asyncio.sleep(0.01)
        stop()
        ipc.send(writer, -1)  # after stop: not delivered
        await asyncio.sleep(0.05)

    try:
        asyncio.run(scenario())
    finally:
        ctx.destroy(linger=0)
    expected = [0, 1, 2, 3, 4] + [100 * burst + i for burst in range(20) for i in range(burst)]
    assert received == expected


def test_recv_some_waits_for_the_first_and_takes_the_queued_rest() -> None:
    ctx, reader, writer = _sockets()
    try:
        assert ipc.recv_nowait(reader) == []
        late = threading.Timer(0.1, ipc.send, (writer, "late"))
        late.start()
        assert ipc.recv_some(reader) == ["late"]  # blocked until it came
        for message in ("a", "b", "c"):
            ipc.send(writer, message)
        got: list[str] = []
        while len(got) < 3:
            got += ipc.recv_some(reader)
        assert got == ["a", "b", "c"]
    finally:
        ctx.destroy(linger=0)


def test_a_message_whose_handling_fails_strands_none_after_it(caplog) -> None:
    ctx, reader, writer = _sockets()
    received: list[int] = []

    def handle(message: int) -> None:
        if message == 1:
            raise ValueError("bad message")
        received.append(message)

    async def scenario() -> None:
        for i in range(4):  # drained in one wake-up: the failure is in its middle
            ipc.send(writer, i)
        await asyncio.sleep(0.05)
        stop = ipc.read_as_they_come(reader, handle)
        stop()

    try:
        asyncio.run(scenario())
    finally:
        ctx.destroy(linger=0)
    assert received == [0, 2, 3]
    assert "handling a int from the engine failed" in caplog.text
