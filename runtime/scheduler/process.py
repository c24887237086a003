"""The scheduler's process: loads the model, sizes the KV pool, then loops over requests.

It reports readiness (or the load error) through a pipe, receives requests on its PULL socket,
sends token updates to the detokenizer and control replies to the tokenizer manager. It blocks
on its socket only when it has no work, so decoding never waits for messages.

Under tensor parallelism this process is rank 0: it joins the ranks' group before loading its
shard, and its runner broadcasts every model call to the other ranks (`distributed.leader`).
"""

from __future__ import annotations

import functools
import logging
import time
import traceback
from dataclasses import asdict
from multiprocessing.connection import Connection
from multiprocessing.sharedctypes import Synchronized

import zmq

from sglang.ops.attention import AttentionBackend
from sglang.runtime.distributed.group import tp_group
from sglang.runtime.distributed.leader import HEARTBEAT_S, LeaderRunner
from sglang.runtime.distributed.placement import RankPlacement, join
from sglang.runtime.execution.model_runner import ModelRunner, attention_backend_for, kv_bytes_per_token
from sglang.runtime.execution.window_layers import WindowLayout, window_pool_refusal
from sglang.runtime.loader.model_loading import LoadedModel, load_model, select
from sglang.runtime.lora.adapter import LoraError
from sglang.runtime.lora.paths import LoraRef
from sglang.runtime.lora.startup import build_lora_manager
from sglang.runtime.memory.token_allocator import PagedTokenAllocator
from sglang.runtime.memory.window_pool import WindowPool
from sglang.runtime.observability import request_stamps
from sglang.runtime.observability.stage_spans import report_scheduler_stages
from sglang.runtime.observability.step_profiler import ProfileError
from sglang.runtime.observability.tracing import StageTracer
from sglang.runtime.processes import ipc
from sglang.runtime.processes.child_setup import freeze_startup_objects, init_child_process
from sglang.runtime.processes.control import (
    ConcatAndAppend,
    ConcatResult,
    ContinueGeneration,
    ControlError,
    ControlReply,
    ControlRequest,
    FlushCache,
    FlushResult,
    GetSchedulerStatus,
    GetWeightsByName,
    LoadLoraAdapter,
    LoraResult,
    PauseGeneration,
    ProfileResult,
    SchedulerStatus,
    SetLogLevel,
    StartProfile,
    StopProfile,
    UnloadLoraAdapter,
    UpdateWeightsFromDisk,
    UpdateWeightsFromTensor,
    WeightsRead,
    WeightsUpdated,
)
from sglang.runtime.processes.messages import (
    AbortRequest,
    GenerateRequest,
    ReadyInfo,
    ReadyReport,
    StartupFailure,
    TokenBatch,
)
from sglang.runtime.processes.step_monitor import StepHeartbeat
from sglang.runtime.scheduler import kv_concat, weight_updates
from sglang.runtime.scheduler.grammar import GrammarBackend
from sglang.runtime.scheduler.scheduler import Scheduler
from sglang.runtime.server_args import ServerArgs
from sglang.runtime.speculative.config import STANDALONE, speculative_config
from sglang.runtime.speculative.draft_model import load_draft
from sglang.runtime.speculative.speculator import build_speculator

logger = logging.getLogger(__name__)


def kv_pool_tokens(
    args: ServerArgs, loaded: LoadedModel, backend: AttentionBackend, layout: WindowLayout | None = None
) -> int:
    """`--max-total-tokens`, else the share of the device's free memory (the platform's runtime:
    GPU memory on a GPU) that the backend's KV layout fits; with a window pool (`layout`), each
    full token also brings `--swa-full-tokens-ratio` window tokens to its windowed layers."""
    if args.max_total_tokens is not None:
        return args.max_total_tokens
    free = loaded.platform.runtime.memory_info().free_bytes
    if layout is not None:
        return int(free * args.mem_fraction_static / layout.bytes_per_full_token(args.swa_full_tokens_ratio))
    return int(free * args.mem_fraction_static) // kv_bytes_per_token(loaded.model, backend)


def build_runner(args: ServerArgs, placement: RankPlacement | None = None) -> tuple[LoadedModel, ModelRunner]:
    """Joins the rank group (with a placement), loads this rank's shard and builds its runner. The
    KV pool has the same number of pages on every rank: the smallest any rank's memory allows.
    Windowed layers get a window pool where `window_pool_refusal` finds nothing against it."""
    platform = select(args)
    group = join(platform, placement)
    loaded = load_model(args, platform)
    backend = attention_backend_for(loaded.model, loaded.platform, args.page_size, args.kv_cache_dtype)
    buckets = args.graph_buckets(loaded.platform.capabilities)
    layout = WindowLayout.of(loaded.model.config, backend)
    refusal = None if layout is None else window_pool_refusal(args, backend)
    window_layout = layout if refusal is None else None
    num_pages = group.agree_min(kv_pool_tokens(args, loaded, backend, window_layout) // args.page_size + 1)
    num_slots = PagedTokenAllocator(num_pages, args.page_size).num_slots
    window_pool = None
    if window_layout is not None:
        full_tokens = (num_pages - 1) * args.page_size
        window_tokens = window_layout.window_tokens(full_tokens, args.swa_full_tokens_ratio, args.chunked_prefill_size)
        window_pool = WindowPool(num_slots, window_tokens, window_layout.window)
    runner = ModelRunner(loaded.model, loaded.platform, num_slots, backend, buckets, window_pool, refusal)
    return loaded, runner


def prepare_verify_buckets(runner: ModelRunner, rows: int) -> None:
    """Captures the decode buckets a lone request's verify steps use (up to `rows` rows), so
    that the first requests of a speculative server do not pay for them."""
    started = time.perf_counter()
    sizes = runner.prepare_decode_buckets(rows)
    if sizes:
        seconds = time.perf_counter() - started
        logger.info(
            "speculative decoding: decode buckets %d-%d captured for verify steps in %.1f s",
            sizes[0],
            sizes[-1],
            seconds,
        )


def build_scheduler(args: ServerArgs, placement: RankPlacement | None = None) -> tuple[Scheduler, ReadyInfo]:
    loaded, runner = build_runner(args, placement)
    spec = speculative_config(args)
    if spec is not None:
        prepare_verify_buckets(runner, spec.num_draft_tokens)
    if placement is not None:
        runner = LeaderRunner(runner, tp_group().comm)
    mirror = runner.lora_command if isinstance(runner, LeaderRunner) else None
    lora = build_lora_manager(args, loaded.model, mirror)
    tokenizer = loaded.load_tokenizer()
    context_length = args.context_length or loaded.context_length
    eos = set(loaded.config.eos_token_ids)
    if tokenizer.eos_token_id is not None:
        eos.add(tokenizer.eos_token_id)
    allocator = PagedTokenAllocator(runner.num_slots // args.page_size, args.page_size)
    vocab = loaded.config.vocab_size
    grammar = GrammarBackend(tokenizer, vocab, sorted(eos))
    speculator = None
    if spec is not None and spec.algorithm == STANDALONE:
        kv_tokens = (allocator.num_pages - 1) * allocator.page_size
        speculator = build_speculator(spec, load_draft(args, spec, loaded, kv_tokens))
    tier_mirror = runner.tier_command if isinstance(runner, LeaderRunner) else None
    scheduler = Scheduler(
        runner,
        allocator,
        args,
        tokenizer.decode,
        frozenset(eos),
        context_length,
        grammar,
        lora,
        speculator,
        tier_mirror,
    )
    info = ReadyInfo(
        model_path=str(loaded.source.origin),
        tokenizer_path=str(loaded.source.tokenizer_path),
        chat_template=loaded.source.chat_template,
        architectures=loaded.config.architectures,
        model_type=loaded.config.raw.get("model_type"),
        context_length=context_length,
        vocab_size=vocab,
        max_total_tokens=scheduler.capacity,
        device=loaded.platform.name,
        dtype=str(loaded.model.dtype).removeprefix("torch."),
        eos_token_ids=tuple(sorted(eos)),
        bos_token=tokenizer.bos_token,
        eos_token=tokenizer.eos_token,
        op_table=loaded.op_table.as_dict(),
        lora_enabled=lora is not None,
        lora_adapters=loaded_adapters(scheduler),
        disaggregation_mode=args.disaggregation_mode,
    )
    return scheduler, info


def loaded_adapters(scheduler: Scheduler) -> dict[str, str]:
    lora = scheduler.lora
    return {} if lora is None else {name: a.adapter.path for name, a in lora.adapters.items()}


def scheduler_status(scheduler: Scheduler) -> SchedulerStatus:
    free = scheduler.allocator.available_tokens()
    steps = scheduler.runner.step_stats
    return SchedulerStatus(
        num_running_requests=len(scheduler.running),
        num_waiting_requests=len(scheduler.waiting),
        num_request_tokens=sum(len(req.fill_ids) for req in (*scheduler.running, *scheduler.waiting)),
        kv_tokens_total=scheduler.capacity,
        kv_tokens_free=free,
        kv_tokens_cached=scheduler.cache.total_size(),
        kv_tokens_evictable=scheduler.cache.evictable_size(),
        kv_tokens_in_use=scheduler.capacity - free,
        **scheduler.stats,
        static_steps=steps.static_steps,
        eager_steps=steps.eager_steps,
        static_step_fallbacks=steps.static_fallbacks,
        verify_steps=steps.verify_steps,
        **(asdict(scheduler.hicache.stats) if scheduler.hicache is not None else {}),
        **(scheduler.pd_prefill.stats() if scheduler.pd_prefill is not None else {}),
        **(scheduler.pd_decode.stats() if scheduler.pd_decode is not None else {}),
    )


@functools.singledispatch
def answer(message: object, scheduler: Scheduler) -> object:
    """The reply to control message `message`, dispatched on its type. A type without a handler
    is a bug of the sender (or a version mismatch), answered as such rather than guessed at."""
    return ControlError(f"unknown control message type {type(message).__name__}")


@answer.register
def _(message: FlushCache, scheduler: Scheduler) -> FlushResult:
    if scheduler.flush_cache():
        return FlushResult(True)
    return FlushResult(False, "requests are running or waiting")


@answer.register
def _(message: GetSchedulerStatus, scheduler: Scheduler) -> SchedulerStatus:
    return scheduler_status(scheduler)


@answer.register
def _(message: ConcatAndAppend, scheduler: Scheduler) -> ConcatResult:
    try:
        return kv_concat.concat_cached_branches(scheduler, message.prefix_ids, message.branch_ids)
    except Exception as e:  # an optimization that failed must not take the server down
        logger.exception("concat_and_append failed")
        sequence = [*message.prefix_ids, *(t for branch in message.branch_ids for t in branch)]
        return ConcatResult(False, sequence, reason=f"internal error: {type(e).__name__}: {e}")


@answer.register
def _(message: LoadLoraAdapter, scheduler: Scheduler) -> LoraResult:
    try:
        if scheduler.lora is None:
            raise LoraError("this server serves no LoRA adapters (start it with --enable-lora)")
        scheduler.lora.load(LoraRef.from_json(vars(message)))
    except LoraError as e:
        return LoraResult(False, str(e), loaded_adapters(scheduler))
    return LoraResult(True, None, loaded_adapters(scheduler))


@answer.register
def _(message: UnloadLoraAdapter, scheduler: Scheduler) -> LoraResult:
    try:
        if scheduler.lora is None:
            raise LoraError("this server serves no LoRA adapters (start it with --enable-lora)")
        scheduler.lora.unload(message.lora_name)
    except LoraError as e:
        return LoraResult(False, str(e), loaded_adapters(scheduler))
    return LoraResult(True, None, loaded_adapters(scheduler))


@answer.register
def _(message: StartProfile, scheduler: Scheduler) -> ProfileResult:
    try:
        return ProfileResult(True, scheduler.profiler.start(message.settings))
    except ProfileError as e:
        return ProfileResult(False, str(e))


@answer.register
def _(message: StopProfile, scheduler: Scheduler) -> ProfileResult:
    try:
        return ProfileResult(True, scheduler.profiler.stop())
    except (ProfileError, OSError) as e:  # OSError: the trace could not be written where asked
        return ProfileResult(False, str(e))


@answer.register
def _(message: PauseGeneration, scheduler: Scheduler) -> bool:
    scheduler.pause(message.mode)
    return True


@answer.register
def _(message: ContinueGeneration, scheduler: Scheduler) -> bool:
    if message.empty_cache:
        scheduler.runner.platform.runtime.empty_cache()
    scheduler.resume()
    return True


@answer.register
def _(message: SetLogLevel, scheduler: Scheduler) -> bool:
    logging.getLogger().setLevel(message.level)
    return True


@answer.register(UpdateWeightsFromDisk)
@answer.register(UpdateWeightsFromTensor)
def _(message: UpdateWeightsFromDisk | UpdateWeightsFromTensor, scheduler: Scheduler) -> WeightsUpdated:
    return weight_updates.update_weights(scheduler, message)


@answer.register
def _(message: GetWeightsByName, scheduler: Scheduler) -> WeightsRead:
    return weight_updates.get_weights(scheduler, message)


def _handle(scheduler: Scheduler, message: object, control: zmq.Socket) -> None:
    if isinstance(message, GenerateRequest):
        if request_stamps.STAMPS is not None:
            request_stamps.STAMPS.stamp(message.rid, "scheduler_received")
        scheduler.add_request(message)
    elif isinstance(message, AbortRequest):
        scheduler.abort(message.rid, message.message)
    elif isinstance(message, ControlRequest):
        try:
            result = answer(message.message, scheduler)
        except Exception as e:  # a failed control call fails that call, not the server
            logger.exception("control message %s failed", type(message.message).__name__)
            result = ControlError(f"{type(message.message).__name__} failed: {type(e).__name__}: {e}")
        ipc.send(control, ControlReply(message.request_id, result))
    else:
        logger.error("ignored a message of unknown type %s", type(message).__name__)


def run_scheduler_process(
    args: ServerArgs,
    endpoints: ipc.Endpoints,
    ready: Connection,
    step_clock: Synchronized,
    placement: RankPlacement | None = None,
) -> None:
    init_child_process("scheduler", args.log_level)
    try:
        scheduler, info = build_scheduler(args, placement)
        tracer = StageTracer.start(args.trace_config("scheduler"))
    except Exception as e:
        ready.send(StartupFailure(f"{type(e).__name__}: {e}", traceback.format_exc()))
        return
    ctx = zmq.Context()
    inbox = ipc.pull(ctx, endpoints.scheduler)
    to_detokenizer = ipc.push(ctx, endpoints.detokenizer)
    control = ipc.push(ctx, endpoints.control)
    ready.send(ReadyReport(info))
    freeze_startup_objects()  # while the parent starts the rest (it does not delay readiness)
    poller = zmq.Poller()
    poller.register(inbox, zmq.POLLIN)
    heartbeat = StepHeartbeat(step_clock)
    # Idle rank 0 wakes to tell the other ranks it is alive (and to notice if one is not).
    ranks_heartbeat = scheduler.runner.heartbeat if isinstance(scheduler.runner, LeaderRunner) else None
    try:
        while True:
            if not scheduler.has_work:
                heartbeat.idle()
                while not poller.poll(None if ranks_heartbeat is None else HEARTBEAT_S * 1000):
                    ranks_heartbeat()
            for message in ipc.recv_nowait(inbox):
                _handle(scheduler, message, control)
            heartbeat.beat()
            updates = scheduler.step()
            if updates:
                if request_stamps.STAMPS is not None:
                    request_stamps.stamp_first_updates(request_stamps.STAMPS, updates, "sending_to_detokenizer")
                ipc.send(to_detokenizer, TokenBatch(updates))
                if tracer is not None:
                    report_scheduler_stages(tracer, updates)
    finally:  # SIGTERM exits through here: blocks queued for storage are written first
        if scheduler.hicache is not None:
            scheduler.hicache.close()
