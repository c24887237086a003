"""The scheduling loop: batch planning, retraction, and finished requests.

One `step()` admits waiting requests that fit (runtime/scheduler/admission.py), gives every
running request its next piece of work (one token when decoding, a chunk of at most
`chunked_prefill_size` prompt tokens when prefilling, both kinds in one batch where the platform
allows), runs the model once, samples and applies the results (runtime/scheduler/step_results.py),
and returns the updates to send. When the KV pool cannot hold the step, the prefix cache is
evicted and, if that is not enough, the most recently admitted request is retracted (its computed
pages go to the prefix cache and it waits to resume), so requests never fail for lack of KV while
the pool could serve them later.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import torch

from sglang.ops.step import StepError
from sglang.runtime.disaggregation.startup import build_sides
from sglang.runtime.execution.model_runner import ModelRunner
from sglang.runtime.lora.adapter import LoraError
from sglang.runtime.lora.manager import LoraManager
from sglang.runtime.memory.hicache_setup import build_hierarchical_cache
from sglang.runtime.memory.radix_cache import RadixCache
from sglang.runtime.memory.tier_commands import TierMirror
from sglang.runtime.memory.token_allocator import PagedTokenAllocator
from sglang.runtime.observability import request_stamps
from sglang.runtime.observability.step_profiler import StepProfiler
from sglang.runtime.processes.control import PauseMode
from sglang.runtime.processes.messages import GenerateRequest, TokenUpdate
from sglang.runtime.scheduler import logprobs
from sglang.runtime.scheduler.admission import Admission, release_lora_slot
from sglang.runtime.scheduler.batch import BatchEntry, build_step, make_entry
from sglang.runtime.scheduler.grammar import GrammarBackend
from sglang.runtime.scheduler.req import INTERNAL_ERROR_STATUS, Req
from sglang.runtime.scheduler.step_results import StepResults, sample_step
from sglang.runtime.server_args import ServerArgs
from sglang.runtime.speculative import verify_step
from sglang.runtime.speculative.config import speculative_config
from sglang.runtime.speculative.speculator import Speculator, build_speculator

logger = logging.getLogger(__name__)

PAUSE_ABORT_MESSAGE = "aborted: generation paused (/pause_generation, mode abort)"

IDLE_PREFETCH_WAIT_S = 0.01
"""With nothing to run but requests waiting for their stored prefix, a step waits this long for
a read to complete instead of returning at once (the loop would spin)."""


class Scheduler:
    def __init__(
        self,
        runner: ModelRunner,
        allocator: PagedTokenAllocator,
        args: ServerArgs,
        tail_text: Callable[[list[int]], str],
        eos_token_ids: frozenset[int],
        context_length: int,
        grammar: GrammarBackend | None,
        lora: LoraManager | None = None,
        speculator: Speculator | None = None,
        tier_mirror: TierMirror | None = None,
    ) -> None:
        """`speculator`: speculative decoding's mode; default: the one `args` ask for (NGRAM
        needs nothing else; a draft model is built by the caller). `tier_mirror`: where the
        hierarchical cache's KV moves go for the other tensor-parallel ranks (None at tp=1)."""
        self.runner = runner
        self.allocator = allocator
        self.window_pool = runner.window_pool
        """Windowed layers' slots, where they keep only their window (`runtime/memory/window_pool.py`)."""
        self.cache = RadixCache(
            page_size=allocator.page_size, disable=args.disable_radix_cache, eviction=args.radix_eviction_policy
        )
        self.hicache = build_hierarchical_cache(args, self.cache, allocator, runner, self.free_slots, tier_mirror)
        self.args = args
        self.tail_text = tail_text
        self.eos_token_ids = eos_token_ids
        self.context_length = context_length
        self.grammar = grammar
        self.lora = lora
        self.vocab_size = runner.model.config.vocab_size
        self.mixed = runner.platform.capabilities.mixed_prefill_decode
        self.waiting: list[Req] = []
        self.running: list[Req] = []
        self.finished_updates: list[TokenUpdate] = []
        self.stats = {
            "prompt_tokens": 0,
            "generation_tokens": 0,
            "cached_tokens": 0,
            "device_hit_tokens": 0,
            "host_hit_tokens": 0,
            "storage_hit_tokens": 0,
            "retractions": 0,
        }
        self.stats |= dict.fromkeys(verify_step.TOTALS, 0)
        self.admission = Admission(
            args, self.cache, allocator, self.hicache, lora, self.window_pool, self.stats, self.finish
        )
        self.speculator = speculator or build_speculator(speculative_config(args))
        self.results = StepResults(
            self.stats,
            self.speculator,
            self.tail_text,
            self.cache,
            self.hicache,
            self.window_pool,
            self.free_slots,
            end=self._end,
            stream=self._stream,
        )
        self.pd_prefill, self.pd_decode = build_sides(self)
        self.profiler = StepProfiler(runner.platform.profiler_activity)
        self.paused = False
        """Between `/pause_generation` and `/continue_generation`: no step runs."""

    # -- requests in and out -------------------------------------------------------------------
    def add_request(self, request: GenerateRequest) -> None:
        req = Req(request, self.eos_token_ids, self.vocab_size, self.context_length)
        if req.lora_name is not None:
            try:
                if self.lora is None:
                    raise LoraError("this server serves no LoRA adapters (start it with --enable-lora)")
                req.cache_namespace = self.lora.use(req.lora_name)
                if self.hicache is not None:
                    self.hicache.add_scope(req.cache_namespace, self.lora.identity(req.lora_name))
            except LoraError as e:
                req.lora_name = None  # holds nothing of the manager's to give back
                req.abort(str(e))
                self.finish(req)
                return
        if self.grammar is not None and self.grammar.wants(req.params):
            self.grammar.submit(req)
        if req.bootstrap is not None and self.pd_prefill is not None:
            self.pd_prefill.prepare(req)
        if req.bootstrap is not None and self.pd_decode is not None:
            self.pd_decode.add(req)  # its KV comes from the prefill server, not from a prefill here
            return
        if self.hicache is not None:  # its stored prefix is read while it waits
            req.prefetch = self.hicache.prefetch(req.cache_ids(len(req.fill_ids) - 1))
        self.waiting.append(req)

    def abort(self, rid: str, message: str) -> None:
        if self.pd_decode is not None and self.pd_decode.abort(rid, message):
            return
        for req in self.waiting:
            if req.rid == rid:
                self.waiting.remove(req)
                req.abort(message)
                self.finish(req)
                return
        for req in self.running:
            if req.rid == rid:
                req.abort(message)
                return  # released at the end of the current step

    @property
    def capacity(self) -> int:
        """Tokens the KV pool holds in all (the padding page excluded)."""
        return self.admission.capacity

    @property
    def has_work(self) -> bool:
        if self.paused:  # only what aborts left to report
            return bool(self.finished_updates) or any(r.finished for r in self.running)
        transfers = self.pd_decode is not None and self.pd_decode.busy
        return bool(self.waiting or self.running or self.finished_updates or transfers)

    def pause(self, mode: PauseMode) -> None:
        """Upstream's `/pause_generation`: no model step runs until `resume`; requests that arrive
        meanwhile wait. `abort` ends every request now; `retract` returns the running ones to the
        queue (their KV released, the computed prefix left in the prefix cache, recomputed on
        resume); `in_place` leaves them as they are, KV included."""
        if mode == "abort":
            for req in [*self.waiting, *self.running]:
                self.abort(req.rid, PAUSE_ABORT_MESSAGE)
        elif mode == "retract":
            while self.running:
                self._retract(self.running[-1])
        self.paused = True

    def resume(self) -> None:
        """Upstream's `/continue_generation`: steps run again, from the queue as it stands."""
        self.paused = False

    def flush_cache(self) -> bool:
        """Empties the device tier of the prefix cache; refused (False) while requests run or
        wait. With the hierarchical cache, what leaves the pool is backed up as on any eviction
        and the host and storage tiers keep what they hold (still valid KV of this model):
        restart to empty the host tier, delete the storage folder to drop stored blocks. NGRAM
        forgets finished requests' tokens too."""
        if self.waiting or self.running:
            return False
        if self.speculator is not None:
            self.speculator.forget()
        if self.hicache is not None:
            self.hicache.flush_device()
            return True
        self.cache.reset()
        self.allocator.clear()
        if self.window_pool is not None:
            self.window_pool.clear()
        return True

    def free_slots(self, slots: torch.Tensor) -> None:
        """Frees full slots, and their window slots with them."""
        if self.window_pool is not None:
            self.window_pool.free(slots)
        self.allocator.free(slots)

    # -- one step ----------------------------------------------------------------------------
    def step(self) -> list[TokenUpdate]:
        self._release_aborted()
        if self.paused:
            updates, self.finished_updates = self.finished_updates, []
            return updates
        if self.pd_decode is not None:
            self.pd_decode.poll(idle=not (self.running or self.waiting))
        self.admission.admit(self.waiting, self.running)
        entries = self._plan()
        if not entries and self.hicache is not None:  # idle but for reads: wait on them, do not spin
            self.hicache.await_prefetch([r.prefetch for r in self.waiting], IDLE_PREFETCH_WAIT_S)
        writer = request_stamps.STAMPS
        times = None if writer is None else request_stamps.StepTimes(writer)
        if entries:
            try:
                step, row_map = build_step(entries, self.lora is not None, self.window_pool)
                started = time.monotonic_ns()
                if times is not None:
                    times.forward_started = started
                logits = self.runner.forward(step)
                ended = time.monotonic_ns()
                if times is not None:
                    times.forward_ended = ended
                verify_step.time_step(self.speculator, entries, (ended - started) / 1e9)
                sampled = sample_step(entries, row_map, logits)
                verified = verify_step.verify_entries(entries, row_map, logits)
                if times is not None:
                    times.sampled = time.monotonic_ns()
            except Exception as exc:  # the step's requests fail; the scheduler goes on
                self._fail_step(entries, exc)
            else:
                self.results.apply(entries, row_map, logits, sampled, verified)
            self.profiler.step_done()
        updates, self.finished_updates = self.finished_updates, []
        if times is not None:
            times.stamp_first_outputs(updates)
        return updates

    def _fail_step(self, entries: list[BatchEntry], exc: Exception) -> None:
        """A step that raised fails the requests in it: the slots it allocated are freed (their
        K/V may be half written, so they never reach the prefix cache), the rest of each
        request's KV is released as usual, and every other request goes on."""
        if isinstance(exc, StepError):
            logger.error("a step of %d requests failed: %s", len(entries), exc)
        else:
            logger.exception("a step of %d requests raised", len(entries))
        message = f"internal error in a model step: {type(exc).__name__}: {exc}"
        for e in entries:
            req = e.req
            self.free_slots(req.slots[req.kv_len - e.extend :])
            req.slots = req.slots[: req.kv_len - e.extend]
            req.abort(message, status_code=INTERNAL_ERROR_STATUS)
            self._end(req)

    def _release_aborted(self) -> None:
        for req in [r for r in self.running if r.finished]:
            self._end(req)

    def _plan(self) -> list[BatchEntry]:
        """Chooses each running request's work for this step and allocates its KV slots."""
        while self.running:
            budget = self.args.chunked_prefill_size
            decode, prefill = [], []
            for req in self.running:
                remaining = len(req.fill_ids) - req.kv_len
                if remaining == 1 and req.output_ids:
                    decode.append(make_entry(req, 1))
                elif budget > 0:
                    prefill.append(make_entry(req, min(remaining, budget)))
                    budget -= prefill[-1].extend
            entries = decode + prefill if self.mixed or not prefill else prefill
            entries = verify_step.attach_drafts(self.speculator, entries, self.mixed)
            if self._allocate(entries):
                return entries
            # Drafts are optional: the step goes without them before a request is retracted.
            if verify_step.drop_drafts(entries) and self._allocate(entries):
                return entries
            self._retract_one()
        return []

    def _allocate(self, entries: list[BatchEntry]) -> bool:
        last = [int(e.req.slots[-1]) if e.req.kv_len else None for e in entries]
        counts = [e.extend for e in entries]
        short = self.allocator.pages_needed(last, counts) - self.allocator.num_free_pages
        if short > 0:
            self.cache.evict(short * self.allocator.page_size, self.free_slots)
        slots = self.allocator.alloc_extend_batch(last, counts)
        if slots is None:
            return False
        if self.window_pool is not None and not self._allocate_window(slots):
            self.allocator.free(slots)
            return False
        for e, new in zip(entries, slots.split(counts)):
            e.req.slots = torch.cat([e.req.slots, new])
        return True

    def _allocate_window(self, slots: torch.Tensor) -> bool:
        """Window slots for the step's new full slots, evicting cached prefixes for room: their
        window slots go with them (some hold none, so eviction goes on while it is short)."""
        pool = self.window_pool
        while (short := pool.shortfall(slots.numel())) and self.cache.evictable_size():
            self.cache.evict(short, self.free_slots)
        return pool.allocate(slots)

    def _retract_one(self) -> None:
        victim = max(self.running, key=lambda r: r.arrival_time)
        logger.info("KV cache full: retracting request %s to resume later", victim.rid)
        self._retract(victim)

    def _retract(self, req: Req) -> None:
        """Back to the queue, its KV released: it is recomputed (from its cached prefix) when admitted again."""
        self.stats["retractions"] += 1
        req.retractions += 1
        self.running.remove(req)
        self._release_kv(req)
        self.waiting.append(req)

    def _release_kv(self, req: Req) -> None:
        if req.match is not None:
            computed = req.cache_ids(req.kv_len)
            self.cache.cache_finished(computed, req.slots, req.match, self.free_slots, req.priority)
            if self.hicache is not None:
                self.hicache.on_cached(computed)
        req.match, req.slots = None, torch.empty(0, dtype=torch.int64)
        release_lora_slot(self.lora, req)

    # -- finished requests ---------------------------------------------------------------------
    def _end(self, req: Req) -> None:
        self.running.remove(req)
        self.finish(req)

    def _stream(self, req: Req) -> None:
        self.finished_updates.append(self._update(req))

    def finish(self, req: Req) -> None:
        """Releases what a finished (or failed) request holds, which no queue lists any more (its
        prefetch, KV, adapter, drafter and grammar state), and queues its last update."""
        if req.prefetch is not None and self.hicache is not None:  # finished while waiting: reads stop
            self.hicache.cancel(req.prefetch)
            req.prefetch = None
        if self.pd_prefill is not None:
            self.pd_prefill.on_finish(req)  # reads its KV, so before the KV is released
        self._release_kv(req)
        if self.lora is not None and req.lora_name is not None:
            self.lora.unuse(req.lora_name)
            req.lora_name = None
        if self.speculator is not None:
            self.speculator.release(req)
        if req.grammar is not None:
            self.grammar.release(req)
        self._stream(req)

    def _update(self, req: Req) -> TokenUpdate:
        new = req.output_ids[req.sent_output_len :]
        update = TokenUpdate(
            rid=req.rid,
            new_token_ids=new,
            finish_reason=req.finish_reason,
            meta=logprobs.request_meta(req),
            decode_spec=None if req.sent_meta else req.decode_spec(),
            trace=req.trace,
        )
        req.sent_output_len, req.sent_meta = len(req.output_ids), True
        return update
