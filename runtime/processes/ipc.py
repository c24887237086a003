"""ZeroMQ endpoints between the engine's processes, and the pickled-message helpers.

Sockets are PUSH/PULL over ipc:// files in a private temporary folder. Each endpoint is bound by
its single reader and connected to by its writer(s), so a child that dies leaves nothing that
blocks the parent.
"""

from __future__ import annotations

import pickle
import tempfile
from dataclasses import dataclass
from typing import Any

import zmq


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


def recv_nowait(sock: zmq.Socket) -> list[Any]:
    """Every message already queued on `sock`, without waiting."""
    messages = []
    while True:
        try:
            messages.append(pickle.loads(sock.recv(zmq.NOBLOCK)))
        except zmq.Again:
            return messages
