"""Our `sglang serve --smg-grpc-mode` as the gRPC tests run it: gRPC on the spec's port, the
HTTP sidecar (`/health`, `/metrics`) on the port after it, which is what readiness polls."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import grpc
from smg_grpc_proto import sglang_scheduler_pb2 as pb
from smg_grpc_proto import sglang_scheduler_pb2_grpc as pb_grpc

from sglang.ci.servers import HOST, RunningServer, ServerGroup, serve_spec

WORKER_KV_TOKENS = 4096


@dataclass
class GrpcWorker:
    sidecar: RunningServer
    """The process, addressed at its HTTP sidecar (`--port + 1`)."""
    grpc_port: int

    @property
    def grpc_url(self) -> str:
        """The worker as smg names it."""
        return f"grpc://{HOST}:{self.grpc_port}"

    def channel(self) -> grpc.Channel:
        return grpc.insecure_channel(f"{HOST}:{self.grpc_port}")

    def stub(self, channel: grpc.Channel) -> pb_grpc.SglangSchedulerStub:
        return pb_grpc.SglangSchedulerStub(channel)

    def running(self, stub: pb_grpc.SglangSchedulerStub) -> int:
        """Requests the scheduler runs or queues now, as `GetLoads` reports them."""
        return stub.GetLoads(pb.GetLoadsRequest(), timeout=30).loads[0].num_total_reqs


def start_grpc_worker(services: ServerGroup, *flags: str) -> GrpcWorker:
    """Starts a gRPC worker without waiting (workers load side by side): call
    `worker.sidecar.wait_ready()` before use."""
    spec = serve_spec(
        "--smg-grpc-mode", "--max-total-tokens", str(WORKER_KV_TOKENS), *flags, name="grpc-worker", log_level="warning"
    )
    # Readiness and the RunningServer's URL are the sidecar's; it lists no models.
    sidecar = dataclasses.replace(spec, port=spec.port + 1, model_path=None)
    return GrpcWorker(services.launch(sidecar, wait=False), spec.port)
