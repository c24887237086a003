"""The typed messages of prefill-decode disaggregation, and their wire form.

A request served in PD mode carries upstream's `bootstrap_host`, `bootstrap_port` and
`bootstrap_room` (the router sends the same three to the prefill and the decode server); the room
names the request on both. On the transfer backend's connection every message is one frame: an
8-byte big-endian length, then that many bytes of JSON; a `KVHeader` with `ok` is followed by a
second frame holding the KV payload (`payload_bytes` bytes).
"""

from __future__ import annotations

import json
import socket
import struct
from dataclasses import asdict, dataclass, field
from typing import Any

_LENGTH = struct.Struct(">Q")
MAX_HEADER_BYTES = 1 << 20
"""A header larger than this is not one of ours: the connection is dropped."""


class TransferError(RuntimeError):
    """A KV transfer failed (peer gone, timed out, refused, or a layout that does not convert);
    it fails the one request it was for."""


@dataclass(frozen=True)
class Bootstrap:
    """Where a request's prefill server is and the room that names the request there."""

    host: str
    port: int
    room: int


@dataclass(frozen=True)
class RoomRequest:
    """Decode to prefill: `fetch` waits up to `timeout_s` for the room's KV; `cancel` drops it."""

    op: str
    room: int
    timeout_s: float = 0.0


@dataclass(frozen=True)
class KVHeader:
    """Prefill to decode: the room's outcome. With `ok`, `first_token` is the token the prefill
    sampled and a payload of `payload_bytes` follows: KV of `shape` (portable layout `[layers,
    tokens, *per-token shape]`, see the attention backend's `kv_to_tokens`) in `dtype`."""

    room: int
    ok: bool
    error: str = ""
    first_token: int = -1
    dtype: str = ""
    shape: list[int] = field(default_factory=list)
    payload_bytes: int = 0


def send_frame(sock: socket.socket, data: bytes) -> None:
    sock.sendall(_LENGTH.pack(len(data)))
    sock.sendall(data)  # no concatenated copy of a large payload


def recv_frame(sock: socket.socket, limit: int) -> bytearray:
    """One frame of at most `limit` bytes, received in place (a KV payload is not copied again);
    TransferError when the peer closed or lied."""
    (length,) = _LENGTH.unpack(_recv_exact(sock, _LENGTH.size))
    if length > limit:
        raise TransferError(f"a frame of {length} bytes exceeds the {limit} expected")
    return _recv_exact(sock, length)


def _recv_exact(sock: socket.socket, count: int) -> bytearray:
    buf = bytearray(count)
    view, got = memoryview(buf), 0
    while got < count:
        n = sock.recv_into(view[got:], count - got)
        if n == 0:
            raise TransferError(f"the peer closed the connection after {got} of {count} bytes")
        got += n
    return buf


def send_message(sock: socket.socket, message: RoomRequest | KVHeader) -> None:
    send_frame(sock, json.dumps(asdict(message)).encode())


def recv_message(sock: socket.socket, kind: type[RoomRequest] | type[KVHeader]) -> Any:
    try:
        fields = json.loads(recv_frame(sock, MAX_HEADER_BYTES))
        return kind(**fields)
    except (ValueError, TypeError) as e:
        raise TransferError(f"malformed {kind.__name__}: {e}") from None
