"""The scheduler's process: loads the model, sizes the KV pool, then loops over requests.

It reports readiness (or the load error) through a pipe, receives requests on its PULL socket,
sends token updates to the detokenizer and control replies to the tokenizer manager. It blocks
on its socket only when it has no work, so decoding never waits for messages.

Under tensor parallelism this process is rank 0: it joins the ranks' group before loading its
shard, and its runner broadcasts every model call to the other ranks (`distributed.leader`).
"""

from __future__ import annotations

import logging
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.sharedctypes import Synchronized

import zmq

from sglang.ops.attention import AttentionBackend
from sglang.runtime import ipc
from sglang.runtime.distributed.group import tp_group
from sglang.runtime.distributed.leader import HEARTBEAT_S, LeaderRunner
from sglang.runtime.distributed.placement import RankPlacement, join
from sglang.runtime.io_struct import AbortRequest, ControlReply, ControlRequest, GenerateRequest, TokenBatch
from sglang.runtime.memory.token_allocator import PagedTokenAllocator
from sglang.runtime.model_loading import LoadedModel, load_model, select
from sglang.runtime.model_runner import ModelRunner, attention_backend_for, kv_bytes_per_token
from sglang.runtime.process_setup import init_child_process
from sglang.runtime.scheduler import kv_concat
from sglang.runtime.scheduler.grammar import GrammarBackend
from sglang.runtime.scheduler.scheduler import Scheduler
from sglang.runtime.server_args import ServerArgs
from sglang.runtime.step_monitor import StepHeartbeat

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReadyInfo:
    """What the parent learns once the model is loaded."""

    model_path: str
    tokenizer_path: str
    chat_template: str | None
    architectures: tuple[str, ...]
    model_type: str | None
    context_length: int
    vocab_size: int
    max_total_tokens: int
    device: str
    dtype: str
    eos_token_ids: tuple[int, ...]
    bos_token: str | None
    eos_token: str | None
    op_table: dict[str, object]
    """The chosen kernel of every op and why each other candidate lost (`OpTable.as_dict`)."""

    def model_info(self) -> dict[str, object]:
        """SGLang's `/get_model_info` answer (`architecture` is ours, beside upstream's list)."""
        return {
            "model_path": self.model_path,
            "tokenizer_path": self.tokenizer_path,
            "is_generation": True,
            "architectures": list(self.architectures),
            "architecture": self.architectures[0] if self.architectures else None,
            "model_type": self.model_type,
            "chat_template": self.chat_template,
            "context_length": self.context_length,
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
            "has_image_understanding": False,
        }


def kv_pool_tokens(args: ServerArgs, loaded: LoadedModel, backend: AttentionBackend) -> int:
    """`--max-total-tokens`, else the share of the device's free memory (the platform's runtime:
    GPU memory on a GPU) that the backend's KV layout fits."""
    if args.max_total_tokens is not None:
        return args.max_total_tokens
    free = loaded.platform.runtime.memory_info().free_bytes
    return int(free * args.mem_fraction_static) // kv_bytes_per_token(loaded.model, backend)


def build_runner(args: ServerArgs, placement: RankPlacement | None = None) -> tuple[LoadedModel, ModelRunner]:
    """Joins the rank group (with a placement), loads this rank's shard and builds its runner. The
    KV pool has the same number of pages on every rank: the smallest any rank's memory allows."""
    platform = select(args)
    group = join(platform, placement)
    loaded = load_model(args, platform)
    backend = attention_backend_for(loaded.model, loaded.platform, args.page_size)
    num_pages = group.agree_min(kv_pool_tokens(args, loaded, backend) // args.page_size + 1)
    num_slots = PagedTokenAllocator(num_pages, args.page_size).num_slots
    buckets = args.graph_buckets(loaded.platform.capabilities)
    return loaded, ModelRunner(loaded.model, loaded.platform, num_slots, backend, buckets)


def build_scheduler(args: ServerArgs, placement: RankPlacement | None = None) -> tuple[Scheduler, ReadyInfo]:
    loaded, runner = build_runner(args, placement)
    tokenizer = loaded.load_tokenizer()
    context_length = args.context_length or loaded.context_length
    eos = set(loaded.config.eos_token_ids)
    if tokenizer.eos_token_id is not None:
        eos.add(tokenizer.eos_token_id)
    allocator = PagedTokenAllocator(runner.num_slots // args.page_size, args.page_size)
    if placement is not None:
        runner = LeaderRunner(runner, tp_group().comm)
    vocab = loaded.config.vocab_size
    grammar = GrammarBackend(tokenizer, vocab, sorted(eos))
    scheduler = Scheduler(runner, allocator, args, tokenizer.decode, frozenset(eos), context_length, grammar)
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
    )
    return scheduler, info


def server_info(scheduler: Scheduler) -> dict:
    return {
        "num_running_requests": len(scheduler.running),
        "num_waiting_requests": len(scheduler.waiting),
        # What routers balance on (`/get_load`): the tokens of every request the server holds.
        "num_request_tokens": sum(len(req.fill_ids) for req in (*scheduler.running, *scheduler.waiting)),
        "kv_tokens_total": scheduler.capacity,
        "kv_tokens_free": scheduler.allocator.available_tokens(),
        "kv_tokens_cached": scheduler.cache.total_size(),
        "kv_tokens_evictable": scheduler.cache.evictable_size(),
        "kv_tokens_in_use": scheduler.capacity - scheduler.allocator.available_tokens(),
        **scheduler.stats,
        "static_steps": scheduler.runner.step_stats.static_steps,
        "eager_steps": scheduler.runner.step_stats.eager_steps,
        "static_step_fallbacks": scheduler.runner.step_stats.static_fallbacks,
    }


def _handle(scheduler: Scheduler, message: object, control: zmq.Socket) -> None:
    if isinstance(message, GenerateRequest):
        scheduler.add_request(message)
    elif isinstance(message, AbortRequest):
        scheduler.abort(message.rid, message.message)
    elif isinstance(message, ControlRequest):
        if message.kind == "flush_cache":
            ok = scheduler.flush_cache()
            reason = {} if ok else {"reason": "requests are running or waiting"}
            ipc.send(control, ControlReply(message.request_id, ok, reason))
        elif message.kind == kv_concat.CONTROL_KIND:
            try:
                result = kv_concat.concat_cached_branches(scheduler, **message.args).payload()
            except Exception as e:  # an optimization that failed must not take the server down
                logger.exception("concat_and_append failed")
                result = {"ok": False, "reason": f"internal error: {type(e).__name__}: {e}"}
            ipc.send(control, ControlReply(message.request_id, result["ok"], result))
        else:
            ipc.send(control, ControlReply(message.request_id, True, server_info(scheduler)))


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
    except Exception as e:
        ready.send(("error", f"{type(e).__name__}: {e}", traceback.format_exc()))
        return
    ctx = zmq.Context()
    inbox = ipc.pull(ctx, endpoints.scheduler)
    to_detokenizer = ipc.push(ctx, endpoints.detokenizer)
    control = ipc.push(ctx, endpoints.control)
    ready.send(("ok", info))
    poller = zmq.Poller()
    poller.register(inbox, zmq.POLLIN)
    heartbeat = StepHeartbeat(step_clock)
    # Idle rank 0 wakes to tell the other ranks it is alive (and to notice if one is not).
    ranks_heartbeat = scheduler.runner.heartbeat if isinstance(scheduler.runner, LeaderRunner) else None
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
            ipc.send(to_detokenizer, TokenBatch(updates))
