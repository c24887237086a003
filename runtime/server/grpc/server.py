"""gRPC mode's two listeners: the gRPC server on `--port` (smg's `SglangScheduler` and the
standard `grpc.health.v1` service) and, as upstream opens it, an HTTP sidecar on `--port + 1`
with `/metrics`, `/health` and `/health_generate` only. Both serve the one tokenizer manager;
`serve.py` runs the sidecar under its draining uvicorn server, so SIGTERM and an engine death
behave as in HTTP mode."""

from __future__ import annotations

import grpc
from fastapi import FastAPI, Request
from fastapi.responses import Response
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from smg_grpc_proto import sglang_scheduler_pb2 as pb
from smg_grpc_proto import sglang_scheduler_pb2_grpc as pb_grpc

from sglang.runtime.server import health_api, native_api
from sglang.runtime.server.errors import ApiError, error_response
from sglang.runtime.server.grpc.servicer import SchedulerServicer
from sglang.runtime.server.state import ServerState

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["SglangScheduler"].full_name

_OPTIONS = [
    ("grpc.max_send_message_length", 256 * 1024 * 1024),
    ("grpc.max_receive_message_length", 256 * 1024 * 1024),
    # As upstream: smg pings every 10 s+ during long prefills; the C-core default minimum (300 s)
    # would answer those pings with GOAWAY.
    ("grpc.http2.min_recv_ping_interval_without_data_ms", 10000),
    ("grpc.keepalive_permit_without_calls", 1),
]


class GrpcServer:
    """The started gRPC server and its health service."""

    def __init__(self, state: ServerState) -> None:
        self.server = grpc.aio.server(options=_OPTIONS)
        self.health = health.aio.HealthServicer()
        pb_grpc.add_SglangSchedulerServicer_to_server(SchedulerServicer(state), self.server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        address = f"{state.args.host}:{state.args.port}"
        if self.server.add_insecure_port(address) == 0:
            raise OSError(f"cannot bind the gRPC server to {address}")

    async def start(self) -> None:
        await self.server.start()
        await self._set(health_pb2.HealthCheckResponse.SERVING)

    async def stop(self, grace_s: float) -> None:
        """NOT_SERVING first (probes stop routing here), then the server stops, letting calls
        in flight finish within `grace_s`."""
        await self._set(health_pb2.HealthCheckResponse.NOT_SERVING)
        await self.server.stop(grace_s)

    async def _set(self, status: int) -> None:
        for service in ("", SERVICE_NAME):
            await self.health.set(service, status)


def create_sidecar_app(state: ServerState) -> FastAPI:
    """The HTTP sidecar: Prometheus metrics and the probes (`health_api`) of the gRPC server's engine."""
    app = FastAPI(title="sglang gRPC sidecar")
    app.state.server = state
    state.metrics()

    @app.exception_handler(ApiError)
    async def on_api_error(request: Request, error: ApiError) -> Response:
        return error_response(error)

    app.add_api_route("/metrics", native_api.metrics, methods=["GET"])
    app.include_router(health_api.router)
    return app
