"""The `sglang.grpc.scheduler.SglangScheduler` service over the tokenizer manager the HTTP API
uses: requests take the same validation, queue, scheduler and detokenizer path, and count in
the same metrics.

Status codes: a request this server cannot serve is INVALID_ARGUMENT, a full queue
RESOURCE_EXHAUSTED, a draining server or a dead engine UNAVAILABLE. A request aborted by its
client (the `Abort` RPC, or a cancelled call, which aborts it and frees its KV at once) ends
with `finish_reason: "abort"`. RPCs this server does not serve answer UNIMPLEMENTED, saying why.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from google.protobuf.struct_pb2 import Struct
from google.protobuf.timestamp_pb2 import Timestamp
from smg_grpc_proto import sglang_scheduler_pb2 as pb
from smg_grpc_proto import sglang_scheduler_pb2_grpc as pb_grpc
from smg_grpc_proto.generated import common_pb2

from sglang.runtime.processes.control import FlushCache, GetSchedulerStatus
from sglang.runtime.processes.messages import AbortRequest
from sglang.runtime.processes.tokenizer_manager import EngineDeadError, QueueFullError, last_item
from sglang.runtime.requests.generate_input import InvalidRequestError
from sglang.runtime.server.grpc.request import generate_input, trace_context
from sglang.runtime.server.grpc.response import StreamCursor, chunk, complete
from sglang.runtime.server.health_api import health_probe
from sglang.runtime.server.state import ServerState

HEALTH_CHECK_TIMEOUT_S = 20.0
"""As upstream's servicer: a one-token generation slower than this is unhealthy."""

CLIENT_ABORT = AbortRequest.__dataclass_fields__["message"].default
"""The finish message of a request its client aborted (not a failure to report as an error)."""


def _failure(finish: dict[str, Any] | None) -> tuple[grpc.StatusCode, str] | None:
    """The status to fail the call with, for a request that ended in an abort it did not ask for."""
    if not finish or finish["type"] != "abort" or finish.get("message") == CLIENT_ABORT:
        return None
    status = finish.get("status_code") or 500
    code = grpc.StatusCode.INVALID_ARGUMENT if status < 500 else grpc.StatusCode.UNAVAILABLE
    return code, finish.get("message") or "aborted"


def _struct(values: dict[str, Any]) -> Struct:
    """`values` as a protobuf Struct (what JSON cannot carry becomes its string)."""

    def plain(value: Any) -> Any:
        if value is None or isinstance(value, (str, int, float, bool)):
            return value
        if isinstance(value, (list, tuple, set)):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {str(k): plain(v) for k, v in value.items()}
        return str(value)

    out = Struct()
    out.update(plain(values))
    return out


def _unimplemented(why: str) -> Callable[..., Any]:
    async def refuse(self: SchedulerServicer, request: Any, context: grpc.aio.ServicerContext) -> None:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, why)

    return refuse


class SchedulerServicer(pb_grpc.SglangSchedulerServicer):
    def __init__(self, state: ServerState) -> None:
        self.state = state
        self.started = time.time()

    async def Generate(
        self, request: pb.GenerateRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.GenerateResponse]:
        if self.state.draining:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the server is shutting down")
        rid = request.request_id
        try:
            obj = generate_input(request, trace_context(context.invocation_metadata()))
            cursor = StreamCursor()
            async for out in self.state.manager.generate(obj):
                if isinstance(out, list):  # n > 1: every sample, finished together
                    for index, sample in enumerate(out):
                        await self._fail_if_failed(sample, context)
                        if request.stream:
                            yield chunk(rid, sample, StreamCursor(), index)
                        yield complete(rid, sample, index)
                    continue
                finished = out["meta_info"]["finish_reason"] is not None
                if finished:
                    await self._fail_if_failed(out, context)
                if request.stream:
                    update = chunk(rid, out, cursor)
                    yield update
                    if finished:
                        yield complete(rid, out, output_ids=list(update.chunk.token_ids))
                elif finished:
                    yield complete(rid, out)
        except InvalidRequestError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        except QueueFullError as e:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(e))
        except EngineDeadError as e:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"the engine died: {e}")

    @staticmethod
    async def _fail_if_failed(output: dict[str, Any], context: grpc.aio.ServicerContext) -> None:
        failure = _failure(output["meta_info"]["finish_reason"])
        if failure is not None:
            await context.abort(*failure)

    async def HealthCheck(
        self, request: pb.HealthCheckRequest, context: grpc.aio.ServicerContext
    ) -> pb.HealthCheckResponse:
        """Healthy only if a one-token generation completes in time."""
        if self.state.draining:
            return pb.HealthCheckResponse(healthy=False, message="the server is shutting down")
        try:
            await asyncio.wait_for(last_item(self.state.manager.generate(health_probe())), HEALTH_CHECK_TIMEOUT_S)
        except TimeoutError:
            return pb.HealthCheckResponse(healthy=False, message=f"no token in {HEALTH_CHECK_TIMEOUT_S:.0f} s")
        except Exception as e:
            return pb.HealthCheckResponse(healthy=False, message=f"unhealthy: {e}")
        return pb.HealthCheckResponse(healthy=True, message="one token generated")

    async def Abort(self, request: pb.AbortRequest, context: grpc.aio.ServicerContext) -> pb.AbortResponse:
        """Aborts the request, and each sample of an `n > 1` request (ids `<rid>-<i>`)."""
        rid = request.request_id
        manager = self.state.manager
        found = [r for r in list(manager.pending) if r == rid or r.startswith(f"{rid}-")]
        aborted = [r for r in found if manager.abort(r)]
        return pb.AbortResponse(success=bool(aborted), message=f"request {rid} {'aborted' if aborted else 'not found'}")

    async def GetModelInfo(
        self, request: pb.GetModelInfoRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetModelInfoResponse:
        info = self.state.info
        tokenizer = self.state.tokenizer
        return pb.GetModelInfoResponse(
            model_path=info.model_path,
            tokenizer_path=info.tokenizer_path,
            is_generation=True,
            served_model_name=self.state.model_name,
            max_context_length=info.context_length,
            vocab_size=info.vocab_size,
            supports_vision=False,
            model_type=info.model_type or "",
            eos_token_ids=list(info.eos_token_ids),
            pad_token_id=getattr(tokenizer, "pad_token_id", None) or 0,
            bos_token_id=getattr(tokenizer, "bos_token_id", None) or 0,
            max_req_input_len=info.context_length - 1,
            architectures=list(info.architectures),
        )

    async def GetServerInfo(
        self, request: pb.GetServerInfoRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetServerInfoResponse:
        from sglang import __version__

        status = await self.state.manager.control(GetSchedulerStatus())
        args = {k: v for k, v in vars(self.state.args).items() if k != "api_key"}
        started = Timestamp()
        started.FromSeconds(int(self.started))
        return pb.GetServerInfoResponse(
            server_args=_struct(args),
            scheduler_info=_struct(status.to_json()),
            active_requests=len(self.state.manager.pending),
            is_paused=self.state.paused,
            uptime_seconds=time.time() - self.started,
            sglang_version=__version__,
            server_type="grpc",
            start_time=started,
            max_total_num_tokens=self.state.info.max_total_tokens,
        )

    async def GetLoads(self, request: pb.GetLoadsRequest, context: grpc.aio.ServicerContext) -> pb.GetLoadsResponse:
        """One data-parallel rank (0): routers balance across servers here, not inside one."""
        from sglang import __version__

        if request.HasField("dp_rank") and request.dp_rank != 0:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"dp_rank {request.dp_rank}: this server has rank 0 only"
            )
        s = await self.state.manager.control(GetSchedulerStatus())
        total = s.num_running_requests + s.num_waiting_requests
        usage = s.kv_tokens_in_use / s.kv_tokens_total if s.kv_tokens_total else 0.0
        load = pb.SchedulerLoad(
            dp_rank=0,
            num_running_reqs=s.num_running_requests,
            num_waiting_reqs=s.num_waiting_requests,
            num_total_reqs=total,
            num_used_tokens=s.kv_tokens_in_use,
            max_total_num_tokens=s.kv_tokens_total,
            token_usage=usage,
            cache_hit_rate=s.cached_tokens / prompt if (prompt := s.prompt_tokens + s.cached_tokens) else 0.0,
            utilization=usage,
            max_running_requests=self.state.args.max_running_requests,
            queues=pb.QueueMetrics(waiting=s.num_waiting_requests),
        )
        return pb.GetLoadsResponse(
            timestamp=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            version=__version__,
            dp_rank_count=1,
            loads=[load],
            aggregate=pb.AggregateMetrics(
                total_running_reqs=s.num_running_requests,
                total_waiting_reqs=s.num_waiting_requests,
                total_reqs=total,
                avg_token_usage=usage,
                avg_utilization=usage,
            ),
        )

    async def FlushCache(
        self, request: common_pb2.FlushCacheRequest, context: grpc.aio.ServicerContext
    ) -> common_pb2.FlushCacheResponse:
        """Empties the prefix cache; refused (success false, with the reason) while requests run."""
        result = await self.state.manager.control(FlushCache())
        return common_pb2.FlushCacheResponse(
            success=result.ok, message="cache flushed" if result.ok else f"cache not flushed: {result.reason}"
        )

    Embed = _unimplemented("this server serves generation models only; Embed is not served")
    StartProfile = _unimplemented("profiling is not served over gRPC")
    StopProfile = _unimplemented("profiling is not served over gRPC")
    GetTokenizer = _unimplemented("the tokenizer is not served over gRPC: give smg --tokenizer-path")
    SubscribeKvEvents = _unimplemented("KV cache events are not published by this server")
    LoadLoRAAdapter = _unimplemented("LoRA adapters load at startup here (--lora-paths); not over gRPC")
    UnloadLoRAAdapter = _unimplemented("LoRA adapters load at startup here (--lora-paths); not over gRPC")
    ListLoadedLoRAAdapters = _unimplemented("LoRA adapters are listed over HTTP (/v1/models), not over gRPC")
