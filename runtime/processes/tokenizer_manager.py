"""The engine's front: validates and tokenizes requests, sends them to the scheduler, and
delivers text back to the awaiting callers. Runs on one asyncio event loop.

Every accepted request ends in exactly one final output: finished, aborted (client abort or
disconnect), or failed because a child process died. Nothing waits forever.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import zmq

from sglang.runtime.observability import request_stamps
from sglang.runtime.observability.tracing import RequestSpan, StageTracer
from sglang.runtime.processes import ipc
from sglang.runtime.processes.admission import Admission
from sglang.runtime.processes.control import (
    ControlError,
    ControlMessage,
    ControlReply,
    ControlRequest,
    LoraResult,
    UpdateWeightsFromDisk,
    UpdateWeightsFromTensor,
    WeightsUpdated,
)
from sglang.runtime.processes.merged_streams import merged
from sglang.runtime.processes.messages import (
    AbortRequest,
    GenerateRequest,
    ReadyInfo,
    RequestMeta,
    TextBatch,
    TextUpdate,
)
from sglang.runtime.processes.sessions import Sessions
from sglang.runtime.requests.generate_input import GenerateInput, InvalidRequestError, SingleInput
from sglang.runtime.requests.meta_info import MetaInfo

logger = logging.getLogger(__name__)

R = TypeVar("R")


_LOGPROB_ROWS = ("input_top_logprobs", "output_top_logprobs", "input_token_ids_logprobs", "output_token_ids_logprobs")
"""meta_info fields holding, per token, a list of `(logprob, token_id)` pairs (or None)."""


class EngineDeadError(RuntimeError):
    """A child process of the engine died; the engine serves nothing more."""


class QueueFullError(RuntimeError):
    """The waiting queue is at `max_queued_requests` (HTTP 503)."""


class ControlFailedError(RuntimeError):
    """The scheduler answered a control message with `ControlError`."""


@dataclass
class _Pending:
    input: SingleInput
    meta: MetaInfo
    updates: asyncio.Queue[TextUpdate | BaseException] = field(default_factory=asyncio.Queue)
    received_any: bool = False
    """Whether an update of the request has come back yet (its first is stamped)."""


async def _gather_or_cancel(awaitables: list[Awaitable[Any]]) -> list[Any]:
    """The results of `awaitables`, run together. If one fails, the others are cancelled (which
    aborts their requests and frees their KV) before the error propagates: no orphaned work."""
    tasks = [asyncio.ensure_future(a) for a in awaitables]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


async def last_item(stream: AsyncIterator[Any]) -> Any:
    """The last item an async iterator yields (the final, complete output)."""
    last = None
    async for item in stream:
        last = item
    return last


class TokenizerManager:
    def __init__(
        self,
        endpoints: ipc.Endpoints,
        info: ReadyInfo,
        tokenizer: Any,
        max_queued: int,
        tracer: StageTracer | None = None,
        allow_auto_truncate: bool = False,
        weight_version: str = "default",
    ) -> None:
        self.info = info
        self.weight_version = weight_version
        """The label of the served weights in every output's `meta_info` (`--weight-version`,
        changed by `/update_weight_version`)."""
        self.sessions = Sessions(self.abort)
        """Upstream's sessions: the turns a request may continue (`/open_session`)."""
        self.admission = Admission(
            info, tokenizer, allow_auto_truncate, dict(info.lora_adapters or {}), sessions=self.sessions
        )
        """Checks and tokenizes each prompt before it is queued (and knows the loaded adapters)."""
        self.tracer = tracer
        """Makes each request's root span when tracing is on (`--enable-trace`)."""
        self.tokenizer = tokenizer
        self.max_queued = max_queued
        self.ctx = zmq.Context()
        self.to_scheduler = ipc.push(self.ctx, endpoints.scheduler)
        self.from_detokenizer = ipc.pull(self.ctx, endpoints.tokenizer)
        self.from_control = ipc.pull(self.ctx, endpoints.control)
        self.pending: dict[str, _Pending] = {}
        self.admitting = asyncio.Event()
        """Cleared while the model's weights change: new requests wait for it."""
        self.admitting.set()
        self._weights_lock = asyncio.Lock()
        self.control_waiters: dict[str, asyncio.Future[ControlReply]] = {}
        self.dead_reason: str | None = None
        self.finish_observers: list[Callable[[dict[str, Any], RequestMeta | None], None]] = []
        """Called with each request's final `meta_info` and its last `RequestMeta` (None when it
        never reached the scheduler's reply): metrics, request logs."""
        self._stop_reading: list[Callable[[], None]] = []

    def start(self) -> None:
        """Starts delivering the children's replies; called on the running event loop."""
        self._stop_reading = [
            ipc.read_as_they_come(self.from_detokenizer, self._receive_text),
            ipc.read_as_they_come(self.from_control, self._receive_control),
        ]

    # -- requests ----------------------------------------------------------------------------
    def generate(self, obj: GenerateInput) -> AsyncIterator[dict[str, Any] | list[dict[str, Any]]]:
        """Yields cumulative outputs: streaming, the output dicts of one prompt with n == 1, or
        of every sequence of a batch or n > 1 with its `index`; else once, the output dict, or a
        list of them for a batch or n > 1. Traced (`--enable-trace`), the whole call is one
        `sglang.request` span; untraced, no tracing code runs."""
        return self._generate(obj, None) if self.tracer is None else self._traced(obj, self.tracer)

    async def _traced(
        self, obj: GenerateInput, tracer: StageTracer
    ) -> AsyncIterator[dict[str, Any] | list[dict[str, Any]]]:
        received = time.time_ns()
        root = tracer.begin("sglang.request", obj.trace_context, received, {"sglang.stream": obj.stream})
        outcome = "incomplete"  # the caller stopped reading (a disconnect)
        try:
            async for out in self._generate(obj, root, received):
                yield out
            outcome = "ok"
        except Exception as e:
            outcome = type(e).__name__
            raise
        finally:
            root.end({"sglang.outcome": outcome})

    async def _generate(
        self, obj: GenerateInput, root: RequestSpan | None, received: int = 0
    ) -> AsyncIterator[dict[str, Any] | list[dict[str, Any]]]:
        try:
            items = obj.split()
        except InvalidRequestError:
            raise
        except (TypeError, ValueError, AttributeError, LookupError) as e:
            # split() only parses client data: these mean a field of the wrong type or shape.
            raise InvalidRequestError(f"a field of the request has the wrong type or shape: {e}") from None
        if request_stamps.STAMPS is not None:
            for item in items:
                request_stamps.stamp_generate_called(request_stamps.STAMPS, item.rid)
        if root is None:
            prepared = [(item, self.admission.prepare(item)) for item in items]
        else:
            root.stage("receive", received, {"sglang.prompts": len(items)})
            prepared = [(item, self._prepare_traced(item, root)) for item in items]
        sequences = sum(req.params.n for _, req in prepared)
        if sequences > self.max_queued:
            raise InvalidRequestError(
                f"the request asks for {sequences} sequences; at most {self.max_queued} can be queued", "n"
            )
        if not obj.is_batch and len(prepared) == 1 and prepared[0][1].params.n == 1:
            interval = prepared[0][1].params.stream_interval or 1
            sent = 0
            async for out in self._run(*prepared[0]):
                count = len(out["output_ids"])
                if out["meta_info"]["finish_reason"] is not None or (obj.stream and count - sent >= interval):
                    sent = count
                    yield out
            return
        if obj.stream:
            async for out in self._interleaved(prepared):
                yield out
            return
        results = await _gather_or_cancel([self._run_n(item, req) for item, req in prepared])
        flat = [out for group in results for out in group]
        yield flat if obj.is_batch or len(flat) > 1 else flat[0]

    async def _interleaved(self, prepared: list[tuple[SingleInput, GenerateRequest]]) -> AsyncIterator[dict[str, Any]]:
        """Upstream's stream of a batch or of n > 1: every sequence's outputs as they come, each
        with its `index` (prompt-major: sample j of prompt i is i * n + j), every
        `stream_interval` tokens and at its end."""
        streams = [self._run(item, copy) for item, req in prepared for copy in await self._copies(item, req)]
        intervals = [req.params.stream_interval or 1 for _, req in prepared for _ in range(req.params.n)]
        sent = [0] * len(streams)
        async for index, out in merged(streams):
            count = len(out["output_ids"])
            if out["meta_info"]["finish_reason"] is not None or count - sent[index] >= intervals[index]:
                sent[index] = count
                yield {**out, "index": index}

    def _prepare_traced(self, item: SingleInput, root: RequestSpan) -> GenerateRequest:
        start = time.time_ns()
        request = self.admission.prepare(item)
        root.stage("tokenize", start, {"sglang.rid": item.rid, "sglang.prompt_tokens": len(request.input_ids)})
        return replace(request, trace=root.carrier)

    async def _run_n(self, item: SingleInput, request: GenerateRequest) -> list[dict[str, Any]]:
        return await _gather_or_cancel([self._final(item, c) for c in await self._copies(item, request)])

    async def _copies(self, item: SingleInput, request: GenerateRequest) -> list[GenerateRequest]:
        """`request`'s n sequences, one request each (sample j seeded `seed + j`); for n > 1 its
        prompt is prefilled once first, so that they share its KV through the prefix cache."""
        n = request.params.n
        if n > 1:
            warm = replace(request, rid=f"{request.rid}-prefill", params=replace(request.params, max_new_tokens=0, n=1))
            await self._final(item, warm)
        copies = []
        for i in range(n):
            seed = None if request.params.seed is None else request.params.seed + i
            params = replace(request.params, n=1, seed=seed)
            copies.append(replace(request, rid=request.rid if n == 1 else f"{request.rid}-{i}", params=params))
        return copies

    async def _final(self, item: SingleInput, request: GenerateRequest) -> dict[str, Any]:
        return await last_item(self._run(item, request))

    async def _run(self, item: SingleInput, request: GenerateRequest) -> AsyncIterator[dict[str, Any]]:
        await self.admitting.wait()
        if self.dead_reason is not None:
            raise EngineDeadError(self.dead_reason)
        if len(self.pending) >= self.max_queued:
            raise QueueFullError(f"{len(self.pending)} requests are in flight (max_queued_requests)")
        if request.rid in self.pending:
            raise InvalidRequestError(f"request id {request.rid!r} is already in use", "rid")
        if item.session is not None:
            self.sessions.start(item.session, request.rid, request.input_ids, request.params.max_new_tokens)
        pending = self.pending[request.rid] = _Pending(item, MetaInfo(request.logprobs))
        if request_stamps.STAMPS is not None:
            request_stamps.STAMPS.stamp(request.rid, "sending_to_scheduler")
        ipc.send(self.to_scheduler, request)
        finished = False
        first = True
        output_ids: list[int] = []
        try:
            while not finished:
                update = await pending.updates.get()
                if isinstance(update, BaseException):
                    raise update
                finished = update.finish_reason is not None
                pending.meta.add(update.meta)
                output = self._output(item, update, pending.meta, request.input_ids)
                output_ids = update.output_ids
                if item.session is not None and not finished:
                    self.sessions.progress(item.session, request.rid, output_ids)
                if finished:
                    self._observe(item, output["meta_info"], pending.meta.latest)
                if first and request_stamps.STAMPS is not None:
                    request_stamps.STAMPS.stamp(request.rid, "output_built")
                first = False
                yield output
        finally:
            del self.pending[request.rid]
            if item.session is not None:
                completed = finished and update.finish_reason.kind != "abort"
                self.sessions.finish(item.session, request.rid, output_ids, completed)
            if not finished and self.dead_reason is None and not self.ctx.closed:
                # The caller went away before the end (disconnect, cancel): free its KV now.
                ipc.send(self.to_scheduler, AbortRequest(request.rid, "the client disconnected"))
                self._observe(item, {"id": request.rid, "finish_reason": {"type": "abort"}}, None)

    async def update_weights(
        self, message: UpdateWeightsFromDisk | UpdateWeightsFromTensor, abort_all: bool = False
    ) -> WeightsUpdated:
        """Upstream's order: abort what is in flight (`abort_all`), hold new requests back, let
        those in flight finish, then swap the weights in the scheduler; one update at a time."""
        if abort_all:
            self.abort_all()
        async with self._weights_lock:
            self.admitting.clear()
            try:
                while self.pending:
                    await asyncio.sleep(0.01)
                return await self.control(message, timeout=3600.0)
            finally:
                self.admitting.set()

    def _observe(self, item: SingleInput, meta: dict[str, Any], latest: RequestMeta | None) -> None:
        if item.log_metrics:
            for observe in self.finish_observers:
                observe(meta, latest)

    def abort_all(self) -> None:
        for rid in list(self.pending):
            self.abort(rid)

    def abort(self, rid: str) -> bool:
        if rid not in self.pending:
            return False
        ipc.send(self.to_scheduler, AbortRequest(rid))
        return True

    def _output(self, item: SingleInput, update: TextUpdate, info: MetaInfo, prompt_ids: list[int]) -> dict[str, Any]:
        """The user's output dict: the update's text and ids with the request's `meta_info`."""
        meta = info.to_json(item.rid, update.finish_reason, self.weight_version)
        if item.return_prompt_token_ids:
            meta["prompt_token_ids"] = prompt_ids
        if item.return_text_in_logprobs and "output_token_logprobs" in meta:
            for key in ("input_token_logprobs", "output_token_logprobs"):
                meta[key] = self._with_text(meta[key])
            # As SGLang: the top logprobs and those of asked ids get their tokens' text too.
            for key in _LOGPROB_ROWS:
                meta[key] = [None if row is None else self._with_text(row) for row in meta[key]]
        return {"text": update.text, "output_ids": update.output_ids, "meta_info": meta}

    def _with_text(self, pairs: list[tuple[float | None, int]]) -> list[tuple[float | None, int, str]]:
        """`(logprob, token_id)` pairs as `(logprob, token_id, token_text)`."""
        return [(lp, t, self.tokenizer.decode([t])) for lp, t in pairs]

    # -- control and health ------------------------------------------------------------------
    async def control(self, message: ControlMessage[R], timeout: float = 30.0) -> R:
        """Runs `message` in the scheduler between two steps and returns its reply; raises
        ControlFailedError when the scheduler answers with `ControlError`."""
        if self.dead_reason is not None:
            raise EngineDeadError(self.dead_reason)
        request_id = uuid.uuid4().hex
        future = self.control_waiters[request_id] = asyncio.get_running_loop().create_future()
        ipc.send(self.to_scheduler, ControlRequest(request_id, message))
        try:
            reply = await asyncio.wait_for(future, timeout)
        finally:
            self.control_waiters.pop(request_id, None)
        if isinstance(reply.result, ControlError):
            raise ControlFailedError(f"{type(message).__name__}: {reply.result.message}")
        if isinstance(reply.result, LoraResult):  # requests naming an adapter are checked against it
            self.admission.lora_adapters = dict(reply.result.loaded_adapters)
        return reply.result

    def fail_all(self, reason: str) -> None:
        """Marks the engine dead and ends every waiting request with the first reason given: a
        later one (another process exiting because the first did) is a consequence, not the cause."""
        if self.dead_reason is None:
            logger.error("engine failed: %s", reason)
            self.dead_reason = reason
        reason = self.dead_reason
        for pending in self.pending.values():
            pending.updates.put_nowait(EngineDeadError(reason))
        for future in self.control_waiters.values():
            if not future.done():
                future.set_exception(EngineDeadError(reason))

    def _receive_text(self, batch: TextBatch) -> None:
        for update in batch.updates:
            pending = self.pending.get(update.rid)
            if pending is not None:
                pending.updates.put_nowait(update)
                if request_stamps.STAMPS is not None and not pending.received_any:
                    request_stamps.STAMPS.stamp(update.rid, "manager_received")
                pending.received_any = True

    def _receive_control(self, reply: ControlReply) -> None:
        future = self.control_waiters.get(reply.request_id)
        if future is not None and not future.done():
            future.set_result(reply)

    def close(self) -> None:
        for stop in self._stop_reading:
            stop()
        self.ctx.destroy(linger=0)
