"""`sglang serve`: the engine's children, the tokenizer manager on uvicorn's event loop, a
graceful drain on SIGTERM/SIGINT (stop accepting, finish running requests within
`DRAIN_TIMEOUT_S`, exit 0), and an exit with status 1 when the engine dies (a child process
exits, or the scheduler hangs past `--watchdog-timeout` and is killed): pending requests get
503, `/health` says why, and a supervisor restarts the server."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import uvicorn

from sglang.runtime.processes.child_setup import freeze_startup_objects
from sglang.runtime.processes.launch import Children, launch_children
from sglang.runtime.processes.preload import TOKENIZER_CODE, preload
from sglang.runtime.server_args import ServerArgs

if TYPE_CHECKING:
    from sglang.runtime.server.state import ServerState

SERVING_MODULES = (
    *TOKENIZER_CODE,
    "sglang.runtime.processes.tokenizer_manager",
    "sglang.runtime.server.app",
    "sglang.runtime.server.openai.chat_template",
)
"""Imported while the children load the model (`preload`), not before they start: the app, the
tokenizer manager and xgrammar under it take seconds, and the parent would only wait then."""

logger = logging.getLogger("sglang.server")

DRAIN_TIMEOUT_S = 30.0
DEATH_EXIT_DELAY_S = 5.0
"""After the engine dies, `/health` answers 503 (naming the cause) this long before the exit."""


class DrainingServer(uvicorn.Server):
    """uvicorn, with SIGTERM/SIGINT starting a drain instead of an immediate shutdown."""

    def __init__(self, config: uvicorn.Config, state: ServerState) -> None:
        super().__init__(config)
        self.state = state

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._begin_drain, sig)
        try:
            yield
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)

    def _begin_drain(self, sig: signal.Signals) -> None:
        if self.state.draining:  # a second signal: stop now
            self.force_exit = self.should_exit = True
            return
        logger.info("%s received: draining %d request(s), then exiting", sig.name, len(self.state.manager.pending))
        self.state.draining = True
        asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DRAIN_TIMEOUT_S
        while self.state.manager.pending and loop.time() < deadline:
            await asyncio.sleep(0.05)
        self.should_exit = True


async def _serve(args: ServerArgs, children: Children, tokenizer) -> int:
    """Serves until drained or until the engine dies; the exit status (1 after a death)."""
    from sglang.runtime.observability.tracing import StageTracer
    from sglang.runtime.processes.tokenizer_manager import TokenizerManager
    from sglang.runtime.server.app import create_app
    from sglang.runtime.server.state import ServerState

    tracer = StageTracer.start(args.trace_config("tokenizer_manager"))
    manager = TokenizerManager(
        children.endpoints,
        children.info,
        tokenizer,
        args.max_queued_requests,
        tracer,
        args.allow_auto_truncate,
        args.weight_version,
    )
    manager.start()
    loop = asyncio.get_running_loop()
    state = ServerState(args=args, info=children.info, tokenizer=tokenizer, manager=manager)
    grpc_server = None
    if args.smg_grpc_mode:  # grpc is an optional dependency: imported only in gRPC mode
        from sglang.runtime.server.grpc.server import GrpcServer, create_sidecar_app

        grpc_server = GrpcServer(state)
        await grpc_server.start()
        sidecar_port = args.smg_http_sidecar_port
        app, http_port = create_sidecar_app(state), args.port + 1 if sidecar_port is None else sidecar_port
    else:
        app, http_port = create_app(state), args.port
    config = uvicorn.Config(
        app,
        host=args.host,
        port=http_port,
        log_level=args.log_level,
        access_log=False,
        timeout_graceful_shutdown=5,
        lifespan="off",
    )
    server = DrainingServer(config, state)

    def on_dead(reason: str) -> None:
        """Pending requests fail with 503 at once; the server exits a moment later, once their
        answers are out, with status 1 for its supervisor to restart it."""
        first = manager.dead_reason is None
        manager.fail_all(reason)
        if first:
            logger.error("the engine died; exiting with status 1 in %.0f s", DEATH_EXIT_DELAY_S)
            loop.call_later(DEATH_EXIT_DELAY_S, setattr, server, "should_exit", True)

    stop_supervising = children.supervise(loop, on_dead, args.watchdog_timeout)
    ready = loop.create_task(_announce_when_ready(server, args, children))
    try:
        await server.serve()
    finally:
        if grpc_server is not None:
            await grpc_server.stop(DEATH_EXIT_DELAY_S)
        ready.cancel()
        stop_supervising()
        manager.close()
    return 0 if manager.dead_reason is None else 1


async def _announce_when_ready(server: uvicorn.Server, args: ServerArgs, children: Children) -> None:
    while not server.started:
        await asyncio.sleep(0.05)
    info = children.info
    logger.info(
        "ready: %s://%s:%d  device=%s dtype=%s model=%s",
        "grpc" if args.smg_grpc_mode else "http",
        args.host,
        args.port,
        info.device,
        info.dtype,
        info.model_path,
    )
    # Once serving, not before: the collection (a fraction of a second) does not delay readiness.
    freeze_startup_objects()


def serve(args: ServerArgs) -> int:
    if args.node_rank > 0:  # another node of a tensor-parallel server: its ranks only, no HTTP
        from sglang.runtime.distributed.node import serve_follower_node

        return serve_follower_node(args)
    preloading = preload(*SERVING_MODULES)
    children = launch_children(args)
    try:
        preloading.join()
        from sglang.runtime.loader.tokenizer import load_tokenizer
        from sglang.runtime.server.openai.chat_template import resolve_chat_template

        if args.chat_template is not None:
            # A bad --chat-template fails at start-up, not on the first chat request.
            resolve_chat_template(args.chat_template, children.info.chat_template)
        tokenizer = load_tokenizer(Path(children.info.tokenizer_path))
        try:
            import uvloop

            return uvloop.run(_serve(args, children, tokenizer))
        except ImportError:
            return asyncio.run(_serve(args, children, tokenizer))
    finally:
        children.terminate()
