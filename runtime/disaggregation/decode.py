"""The decode server's side: each PD request reserves KV for its prompt, receives the prompt's KV
and first token from the prefill server, then decodes like any running request.

Lifecycle of a request here: `add` reserves `len(input_ids)` slots (evicting the prefix cache
if it must; a request that cannot get them yet waits in `queued`), a thread looks up the prefill
rank at the bootstrap server (`GET /route`) and fetches the room over the transfer backend; the
scheduler's `poll` writes the received KV into the reserved slots through the attention
backend's layout (`kv_from_tokens`, the device runtime's `write_slots`) and appends the first
token, and the request joins the running batch: its next step is a decode step.

Invariants: reserved slots belong to exactly one transfer until it is installed (then to the
request) or fails, is aborted or times out (then they are freed at once); a failure of any kind
ends only its own request, with a 500 that says why; an abort also cancels the room at the
prefill server, which drops its copy.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import logging
import queue
import socket
import threading
import urllib.request
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from sglang.ops.attention import AttentionBackend
from sglang.runtime.disaggregation import tcp_transfer
from sglang.runtime.disaggregation.config import Timeouts
from sglang.runtime.disaggregation.messages import Bootstrap, KVHeader, TransferError
from sglang.runtime.memory.kv_pages import KVPageIO
from sglang.runtime.scheduler.req import INTERNAL_ERROR_STATUS, Req

if TYPE_CHECKING:
    from sglang.runtime.scheduler.scheduler import Scheduler

logger = logging.getLogger(__name__)

IDLE_POLL_S = 0.005
"""How long an otherwise idle scheduler waits for a transfer before looking at its inbox again."""


@dataclass
class _Transfer:
    req: Req
    bootstrap: Bootstrap
    slots: torch.Tensor
    sock: socket.socket | None = None
    cancelled: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def attach(self, sock: socket.socket) -> None:
        with self.lock:
            self.sock = sock
            if self.cancelled:
                self.cancel()

    def cancel(self) -> None:
        """Ends the wait of the fetch thread (called under `lock`); its socket may be closed
        already, when the fetch finished and its result waits to be polled."""
        self.cancelled = True
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_RDWR)


class DecodeSide:
    def __init__(self, scheduler: Scheduler, io: KVPageIO, backend: AttentionBackend) -> None:
        self.scheduler = scheduler
        self.io = io
        self.backend = backend
        self.timeouts = Timeouts.from_env()
        self.queued: list[Req] = []
        self.transfers: dict[str, _Transfer] = {}
        self.results: queue.Queue[tuple[_Transfer, tuple[KVHeader, bytearray] | TransferError]] = queue.Queue()
        self.bytes_received = 0
        self.transfers_received = 0
        self.transfers_failed = 0

    @property
    def busy(self) -> bool:
        return bool(self.queued or self.transfers)

    def add(self, req: Req) -> None:
        capacity = self.scheduler.capacity
        if len(req.input_ids) + self.scheduler.allocator.page_size > capacity:
            req.abort(f"{len(req.input_ids)} tokens do not fit in the KV cache ({capacity} tokens)")
            self.scheduler.finish(req)
            return
        self.queued.append(req)
        self._start_queued()

    def abort(self, rid: str, message: str) -> bool:
        """Ends request `rid` if it waits for its KV here; False when it is not one of ours."""
        req = next((r for r in self.queued if r.rid == rid), None)
        if req is not None:
            self.queued.remove(req)
        elif (transfer := self.transfers.pop(rid, None)) is not None:
            req = transfer.req
            with transfer.lock:
                transfer.cancel()
            self.scheduler.free_slots(transfer.slots)
            b = transfer.bootstrap
            threading.Thread(target=self._cancel_room, args=(b,), name="pd-cancel", daemon=True).start()
        else:
            return False
        req.abort(message)
        self.scheduler.finish(req)
        return True

    def poll(self, idle: bool) -> None:
        """Starts transfers that now have KV to land in and installs the finished ones."""
        self._start_queued()
        try:
            first = self.results.get(timeout=IDLE_POLL_S) if idle and self.transfers else self.results.get_nowait()
        except queue.Empty:
            return
        done = [first]
        while not self.results.empty():
            done.append(self.results.get_nowait())
        for transfer, outcome in done:
            if self.transfers.get(transfer.req.rid) is not transfer:
                continue  # aborted meanwhile: its slots are free already
            del self.transfers[transfer.req.rid]
            try:
                if isinstance(outcome, TransferError):
                    raise outcome
                self._install(transfer, *outcome)
            except Exception as e:  # this request fails; the server goes on
                logger.warning("PD: request %s failed to receive its KV: %s", transfer.req.rid, e)
                self.transfers_failed += 1
                self.scheduler.free_slots(transfer.slots)
                transfer.req.abort(f"KV transfer failed: {e}", status_code=INTERNAL_ERROR_STATUS)
                self.scheduler.finish(transfer.req)

    def stats(self) -> dict[str, int]:
        return {
            "kv_transfer_bytes_received": self.bytes_received,
            "kv_transfers_received": self.transfers_received,
            "kv_transfers_failed": self.transfers_failed,
            "kv_bytes_per_token": self.backend.kv_bytes_per_token() * len(self.io.runner.kv_buffers),
        }

    # -- internals ---------------------------------------------------------------------------
    def _start_queued(self) -> None:
        while self.queued:
            req = self.queued[0]
            slots = self._reserve(len(req.input_ids))
            if slots is None:
                return  # first come, first served: later requests wait behind it
            self.queued.pop(0)
            assert req.bootstrap is not None
            transfer = _Transfer(req, req.bootstrap, slots)
            self.transfers[req.rid] = transfer
            threading.Thread(target=self._fetch, args=(transfer,), name="pd-fetch", daemon=True).start()

    def _reserve(self, count: int) -> torch.Tensor | None:
        scheduler, allocator = self.scheduler, self.scheduler.allocator
        short = allocator.pages_needed([None], [count]) - allocator.num_free_pages
        if short > 0:
            scheduler.cache.evict(short * allocator.page_size, scheduler.free_slots)
        return allocator.alloc_extend(None, count)

    def _fetch(self, transfer: _Transfer) -> None:
        b = transfer.bootstrap
        try:
            host, port = self._route(b)
            outcome: tuple[KVHeader, bytearray] | TransferError = tcp_transfer.fetch(
                host, port, b.room, self.timeouts.waiting_s, transfer.attach
            )
        except TransferError as e:
            outcome = e
        self.results.put((transfer, outcome))

    def _route(self, b: Bootstrap) -> tuple[str, int]:
        """The prefill rank's transfer endpoint, from its bootstrap server."""
        url = f"http://{b.host}:{b.port}/route?engine_rank=0&target_dp_group=0"
        try:
            with urllib.request.urlopen(url, timeout=self.timeouts.waiting_s) as response:
                route = json.loads(response.read())
            return str(route["rank_ip"]), int(route["rank_port"])
        except (OSError, ValueError, KeyError) as e:
            raise TransferError(f"the bootstrap server at {b.host}:{b.port} gave no route: {e}") from None

    def _cancel_room(self, b: Bootstrap) -> None:
        try:
            host, port = self._route(b)
        except TransferError as e:
            logger.info("PD: cannot cancel room %d: %s", b.room, e)
            return
        tcp_transfer.cancel(host, port, b.room)

    def _install(self, transfer: _Transfer, header: KVHeader, payload: bytearray) -> None:
        """Writes the received KV into the reserved slots and makes the request a running one."""
        req, count = transfer.req, len(transfer.slots)
        expected = tuple(
            self.backend.kv_to_tokens(torch.empty(self.io.block_shape(count), device="meta"), self.io.axis).shape
        )
        if tuple(header.shape) != expected:
            raise TransferError(f"the prefill's KV {header.shape} does not convert to this layout's {list(expected)}")
        dtype = getattr(torch, header.dtype, None)
        if not isinstance(dtype, torch.dtype):
            raise TransferError(f"unknown KV dtype {header.dtype!r}")
        tokens = torch.frombuffer(payload, dtype=torch.uint8).view(dtype).reshape(expected)
        block = self.backend.kv_from_tokens(tokens.to(self.backend.kv_dtype), self.io.axis).contiguous()
        self.io.write(transfer.slots, block)
        self.bytes_received += len(payload)
        self.transfers_received += 1
        scheduler = self.scheduler
        if req.grammar_future is not None:  # the first token must reach its grammar: wait for it
            concurrent.futures.wait([req.grammar_future])
            req.grammar_pending()
        if req.grammar_error is not None:
            scheduler.free_slots(transfer.slots)
            req.abort(req.grammar_error)
            scheduler.finish(req)
            return
        req.slots = transfer.slots
        req.match = scheduler.cache.match_prefix([])  # nothing shared: its own KV, locked as any admission
        scheduler.cache.inc_lock_ref(req.match.last_node)
        scheduler.results.append(req, header.first_token, None)
        if req.finished:
            scheduler.finish(req)
        else:
            scheduler.running.append(req)
