"""The pieces of a KV transfer without servers: layouts converting through the portable form, and
the tcp transfer backend's rooms (fetch, timeout, cancel, expiry) over a real loopback socket."""

from __future__ import annotations

import socket
import threading
import time

import pytest
import torch

from sglang.platforms.kernels.torch_native.attention import SdpaAttention
from sglang.runtime.disaggregation import tcp_transfer
from sglang.runtime.disaggregation.messages import KVHeader, TransferError
from sglang.runtime.memory.kv_pages import slot_axis

LAYERS, TOKENS, KV_HEADS, HEAD_DIM = 3, 5, 2, 4


def _ragged_backend() -> object:
    pytest.importorskip("jax")
    from sglang.platforms.kernels.jax.attention import RaggedPagedAttention

    return RaggedPagedAttention(4, KV_HEADS, HEAD_DIM, torch.float32, torch.device("cpu"))


def test_cpu_and_tpu_layouts_meet_in_the_portable_form() -> None:
    """cpu's `[2, n, Hk, D]` and tpu's `[n, 1, 2*Hk, D]` (K at even heads, V at odd) hold the same
    tokens: each converts to and from `[layers, n, 2, Hk, D]`, so either side can be either."""
    cpu = SdpaAttention(4, KV_HEADS, HEAD_DIM, torch.float32, torch.device("cpu"))
    tpu = _ragged_backend()
    tokens = torch.randn(LAYERS, TOKENS, 2, KV_HEADS, HEAD_DIM)
    cpu_block = cpu.kv_from_tokens(tokens, slot_axis(cpu))
    tpu_block = tpu.kv_from_tokens(tokens, slot_axis(tpu))
    assert cpu_block.shape == (LAYERS, *cpu.kv_buffer_shape(TOKENS))
    assert tpu_block.shape == (LAYERS, *tpu.kv_buffer_shape(TOKENS))
    # The same values where each layout keeps them: token 3, KV head 1.
    key, value = tokens[:, 3, 0, 1], tokens[:, 3, 1, 1]
    assert torch.equal(cpu_block[:, 0, 3, 1], key) and torch.equal(cpu_block[:, 1, 3, 1], value)
    assert torch.equal(tpu_block[:, 3, 0, 2], key) and torch.equal(tpu_block[:, 3, 0, 3], value)
    # cpu -> tpu and back, bit for bit.
    moved = tpu.kv_from_tokens(cpu.kv_to_tokens(cpu_block, slot_axis(cpu)), slot_axis(tpu))
    assert torch.equal(moved, tpu_block)
    assert torch.equal(cpu.kv_from_tokens(tpu.kv_to_tokens(moved, slot_axis(tpu)), slot_axis(cpu)), cpu_block)


def _header(room: int, payload: bytes) -> KVHeader:
    return KVHeader(room=room, ok=True, first_token=7, dtype="uint8", shape=[len(payload)], payload_bytes=len(payload))


def test_outbox_serves_a_room_once_and_counts_its_bytes() -> None:
    outbox = tcp_transfer.TcpOutbox("127.0.0.1", expire_s=30)
    try:
        payload = bytes(range(256)) * 1000
        # The fetch may come first: it waits for the room.
        got: dict[str, object] = {}
        fetch = threading.Thread(
            target=lambda: got.setdefault("kv", tcp_transfer.fetch("127.0.0.1", outbox.port, 11, 10, lambda s: None))
        )
        fetch.start()
        time.sleep(0.1)
        outbox.publish(_header(11, payload), payload)
        fetch.join(10)
        header, data = got["kv"]
        assert header.first_token == 7 and data == payload
        # The outbox counts a transfer once its send returns, which may be after the fetch has read it.
        deadline = time.monotonic() + 5
        while outbox.transfers == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert outbox.bytes_sent == len(payload) and outbox.transfers == 1
        with pytest.raises(TransferError, match="no prefill arrived for room 11"):
            tcp_transfer.fetch("127.0.0.1", outbox.port, 11, 0.2, lambda s: None)  # sent once only
    finally:
        outbox.close()


def test_outbox_drops_cancelled_failed_and_expired_rooms() -> None:
    outbox = tcp_transfer.TcpOutbox("127.0.0.1", expire_s=0.5)
    try:
        tcp_transfer.cancel("127.0.0.1", outbox.port, 1)  # cancelled before its prefill finished
        outbox.publish(_header(1, b"x"), b"x")
        assert outbox.pending_rooms() == 0
        outbox.publish(_header(2, b"y"), b"y")
        tcp_transfer.cancel("127.0.0.1", outbox.port, 2)  # cancelled while published
        assert outbox.pending_rooms() == 0
        outbox.publish(KVHeader(room=3, ok=False, error="aborted by the client"))
        with pytest.raises(TransferError, match="aborted by the client"):
            tcp_transfer.fetch("127.0.0.1", outbox.port, 3, 5, lambda s: None)
        outbox.publish(_header(4, b"z"), b"z")  # nobody fetches it
        assert outbox.pending_rooms() == 1
        time.sleep(0.6)
        assert outbox.pending_rooms() == 0
    finally:
        outbox.close()


def test_a_fetch_from_nowhere_fails_its_request_only() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
    with pytest.raises(TransferError, match="failed"):
        tcp_transfer.fetch("127.0.0.1", port, 5, 1, lambda s: None)
