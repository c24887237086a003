"""The prefill server's side: each PD request is prefilled, samples its first token, and its KV
is handed to the transfer backend for the decode server to fetch.

The request's prompt KV is copied to the host when it finishes (through the attention backend's
declared layout and the device runtime, `KVPageIO`), converted to the portable token-major
layout, and published under its room; its slots are then released as any finished request's
are, so the prefill pool never waits on the decode server. A request that ends without a
prefill (aborted, refused) publishes an error, which fails the decode request of the same room.
"""

from __future__ import annotations

import logging
import socket

import torch

from sglang.ops.attention import AttentionBackend
from sglang.runtime.disaggregation.bootstrap_server import BootstrapServer
from sglang.runtime.disaggregation.config import Timeouts
from sglang.runtime.disaggregation.messages import KVHeader
from sglang.runtime.disaggregation.tcp_transfer import TcpOutbox
from sglang.runtime.memory.kv_pages import KVPageIO
from sglang.runtime.scheduler.req import Req

logger = logging.getLogger(__name__)


def reachable_host(host: str) -> str:
    """The address peers use for a server bound to `host` (a wildcard bind names no address)."""
    if host in ("0.0.0.0", "::", ""):
        return socket.gethostbyname(socket.gethostname())
    return host


class PrefillSide:
    def __init__(self, host: str, bootstrap_port: int, io: KVPageIO, backend: AttentionBackend, page_size: int) -> None:
        self.io = io
        self.backend = backend
        self.outbox = TcpOutbox(host, Timeouts.from_env().bootstrap_s)
        self.bootstrap = BootstrapServer(host, bootstrap_port, page_size)
        self.bootstrap.register(
            {
                "role": "Prefill",
                "rank_ip": reachable_host(host),
                "rank_port": self.outbox.port,
                "attn_tp_rank": 0,
                "attn_dp_rank": 0,
                "pp_rank": 0,
            }
        )
        self.bootstrap.start()

    def prepare(self, req: Req) -> None:
        """A PD request stops after its first token: the decode server generates the rest."""
        req.max_new_tokens = min(req.max_new_tokens, 1)

    def on_finish(self, req: Req) -> None:
        """Publishes the finished request's KV (or its failure) under its room; before its KV
        is released."""
        if req.bootstrap is None:
            return
        room, prompt = req.bootstrap.room, len(req.input_ids)
        reason = req.finish_reason
        if reason is not None and reason.kind == "abort":
            self.outbox.publish(KVHeader(room=room, ok=False, error=reason.message or "aborted"))
            return
        if not req.output_ids or req.kv_len < prompt:
            self.outbox.publish(KVHeader(room=room, ok=False, error="the prefill did not complete"))
            return
        try:
            block = self.io.read(req.slots[:prompt])
            tokens = self.backend.kv_to_tokens(block, self.io.axis).contiguous()
        except Exception as e:  # a failed read fails this room's decode, not the server
            logger.exception("PD: reading the KV of room %d failed", room)
            self.outbox.publish(KVHeader(room=room, ok=False, error=f"reading the KV failed: {e}"))
            return
        payload = tokens.view(torch.uint8).numpy().tobytes()
        header = KVHeader(
            room=room,
            ok=True,
            first_token=req.output_ids[0],
            dtype=str(tokens.dtype).removeprefix("torch."),
            shape=list(tokens.shape),
            payload_bytes=len(payload),
        )
        self.outbox.publish(header, payload)

    def stats(self) -> dict[str, int]:
        return {
            "kv_transfer_bytes_sent": self.outbox.bytes_sent,
            "kv_transfers_sent": self.outbox.transfers,
            "kv_transfer_rooms_pending": self.outbox.pending_rooms(),
            "kv_bytes_per_token": self.backend.kv_bytes_per_token() * len(self.io.runner.kv_buffers),
        }

    def close(self) -> None:
        self.bootstrap.close()
        self.outbox.close()
