"""ZeroMQ endpoints between the engine's processes, and the pickled-message helpers.

Sockets are PUSH/PULL over ipc:// files in a private temporary folder. Each endpoint is bound by
its single reader and connected to by its writer(s), so a child that dies leaves nothing that
blocks the parent.
"""

from __future__ import annotations

import asyncio
import logging
import pickle
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import zmq

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Endpoints:
    scheduler: str
    detokenizer: str
    tokenizer: str
    control: str

    @classmethod
    def fresh(cls) -> Endpoints:
        folder = tempfile.mkdtemp(prefix="sglang-ipc-")
        return cls(*(f"ipc://{folder}/{name}" for name in ("scheduler", "detokenizer", "tokenizer", "control")))


def push(ctx: zmq.Context, endpoint: str) -> zmq.Socket:
    sock = ctx.socket(zmq.PUSH)
    # Unbounded queues: a burst of requests must not block the sender (measured: with the default
    # high-water mark, a single thread that sends ~2000 messages before receiving blocks).
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    return sock


def pull(ctx: zmq.Context, endpoint: str) -> zmq.Socket:
    sock = ctx.socket(zmq.PULL)
    sock.setsockopt(zmq.RCVHWM, 0)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind(endpoint)
    return sock


def send(sock: zmq.Socket, message: Any) -> None:
    sock.send(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))


_POLLIN = int(zmq.POLLIN)
"""A plain int: masking with pyzmq's enum flag runs Python-level enum code."""


def recv_some(sock: zmq.Socket) -> list[Any]:
    """At least one message: waits for the first, then takes every one already queued."""
    return [pickle.loads(sock.recv()), *recv_nowait(sock)]


def recv_nowait(sock: zmq.Socket) -> list[Any]:
    """Every message already queued on `sock`, without waiting. Asks the socket whether one is
    queued rather than receiving until `zmq.Again`: building that exception (pyzmq imports inside
    its constructor) cost more than the rest of a streamed token's receive."""
    messages = []
    while sock.getsockopt(zmq.EVENTS) & _POLLIN:
        messages.append(pickle.loads(sock.recv(zmq.NOBLOCK)))
    return messages


def read_as_they_come(sock: zmq.Socket, handle: Callable[[Any], None]) -> Callable[[], None]:
    """Calls `handle` with each message on `sock` (a synchronous socket) from the running event
    loop, as messages arrive; returns the function that stops it. Only this reader may receive
    on `sock`: ZeroMQ's descriptor signals edges, so every wake-up drains the socket.

    Why not `zmq.asyncio`: each of its `recv`s builds a future and re-arms the loop's reader,
    more than twice the CPU of a drained synchronous socket, paid once per streamed token
    (benchmarks/README.md, "bench_stream_cost.py")."""
    loop = asyncio.get_running_loop()
    fd = sock.getsockopt(zmq.FD)

    def drain() -> None:
        for message in recv_nowait(sock):
            try:
                handle(message)
            except Exception:  # one bad message must not strand the ones drained after it
                logger.exception("handling a %s from the engine failed", type(message).__name__)

    loop.add_reader(fd, drain)
    drain()  # messages queued before the reader was added raise no edge
    return lambda: loop.remove_reader(fd)
