"""The `tcp` transfer backend: KV over plain TCP sockets, between processes or hosts, no RDMA.

The prefill side runs a `TcpOutbox`: a listening socket whose rooms hold finished prefills (a
`KVHeader` and its payload) until the decode server fetches them. The decode side `fetch`es a room
on a connection of its own: the outbox answers once the room is published (or failed), or with
an error after `timeout_s`. Invariants:
- a room is sent at most once, then forgotten; a room nobody fetches is dropped `expire_s` after
  it was published, so an abandoned request holds no memory on the prefill side for long;
- `cancel` (the decode request was aborted) drops the room, and a room published after its
  cancel is dropped at once; a failed prefill publishes an error header, which fails the decode.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from sglang.runtime.disaggregation.messages import (
    KVHeader,
    RoomRequest,
    TransferError,
    recv_frame,
    recv_message,
    send_frame,
    send_message,
)

logger = logging.getLogger(__name__)

BACKEND_NAME = "tcp"


@dataclass
class _Parcel:
    header: KVHeader
    payload: bytes
    published: float


class TcpOutbox:
    def __init__(self, host: str, expire_s: float) -> None:
        self.expire_s = expire_s
        self.bytes_sent = 0
        self.transfers = 0
        self._rooms: dict[int, _Parcel] = {}
        self._cancelled: dict[int, float] = {}
        self._cond = threading.Condition()
        self._listener = socket.create_server((host, 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, name="pd-outbox", daemon=True).start()

    # -- the prefill scheduler's side --------------------------------------------------------
    def publish(self, header: KVHeader, payload: bytes = b"") -> None:
        with self._cond:
            self._expire()
            if self._cancelled.pop(header.room, None) is not None:
                return
            self._rooms[header.room] = _Parcel(header, payload, time.monotonic())
            self._cond.notify_all()

    def pending_rooms(self) -> int:
        with self._cond:
            self._expire()
            return len(self._rooms)

    def close(self) -> None:
        self._listener.close()

    # -- connections from decode servers -----------------------------------------------------
    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(conn,), name="pd-outbox-conn", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                request: RoomRequest = recv_message(conn, RoomRequest)
                if request.op == "cancel":
                    self._cancel(request.room)
                    send_message(conn, KVHeader(room=request.room, ok=False, error="cancelled"))
                elif request.op == "fetch":
                    self._send_room(conn, request)
                else:
                    send_message(conn, KVHeader(room=request.room, ok=False, error=f"unknown op {request.op!r}"))
            except (OSError, TransferError) as e:
                logger.warning("PD outbox: a connection failed: %s", e)

    def _cancel(self, room: int) -> None:
        with self._cond:
            self._expire()
            if self._rooms.pop(room, None) is None:
                self._cancelled[room] = time.monotonic()

    def _send_room(self, conn: socket.socket, request: RoomRequest) -> None:
        deadline = time.monotonic() + request.timeout_s
        with self._cond:
            while (parcel := self._rooms.pop(request.room, None)) is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
        if parcel is None:
            error = f"no prefill arrived for room {request.room} within {request.timeout_s:.0f} s"
            send_message(conn, KVHeader(room=request.room, ok=False, error=error))
            return
        send_message(conn, parcel.header)
        if parcel.header.ok:
            send_frame(conn, parcel.payload)
            with self._cond:
                self.bytes_sent += len(parcel.payload)
                self.transfers += 1

    def _expire(self) -> None:
        """Drops rooms and cancel marks older than `expire_s` (called under the lock)."""
        oldest = time.monotonic() - self.expire_s
        for room in [r for r, p in self._rooms.items() if p.published < oldest]:
            logger.warning("PD outbox: room %d was never fetched; dropped", room)
            del self._rooms[room]
        for room in [r for r, t in self._cancelled.items() if t < oldest]:
            del self._cancelled[room]


def fetch(
    host: str, port: int, room: int, timeout_s: float, on_socket: Callable[[socket.socket], None]
) -> tuple[KVHeader, bytearray]:
    """The room's header and payload from the outbox at `host:port`. `on_socket` receives the
    connection first, so an abort can shut it down to end the wait; TransferError otherwise."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s + 5) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            on_socket(sock)
            send_message(sock, RoomRequest(op="fetch", room=room, timeout_s=timeout_s))
            header: KVHeader = recv_message(sock, KVHeader)
            if not header.ok:
                raise TransferError(f"the prefill server reports: {header.error}")
            return header, recv_frame(sock, header.payload_bytes)
    except OSError as e:
        raise TransferError(f"KV transfer from {host}:{port} failed: {e}") from None


def cancel(host: str, port: int, room: int) -> None:
    """Tells the outbox to drop `room`; best effort (the room expires anyway)."""
    try:
        with socket.create_connection((host, port), timeout=5) as sock:
            send_message(sock, RoomRequest(op="cancel", room=room))
            recv_message(sock, KVHeader)
    except (OSError, TransferError) as e:
        logger.info("PD: cancelling room %d at %s:%d failed: %s", room, host, port, e)
