"""Starting the engine's child processes (scheduler, detokenizer) and watching them.

Children start with the `spawn` method: the parent may already hold threads (an event loop,
torch's pools) that `fork` would copy in a broken state.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.process import BaseProcess

from sglang.runtime import ipc
from sglang.runtime.detokenizer import run_detokenizer_process
from sglang.runtime.scheduler.process import ReadyInfo, run_scheduler_process
from sglang.runtime.server_args import ServerArgs

logger = logging.getLogger(__name__)


class EngineStartError(RuntimeError):
    pass


@dataclass
class Children:
    endpoints: ipc.Endpoints
    info: ReadyInfo
    processes: list[BaseProcess]

    def dead(self) -> BaseProcess | None:
        return next((p for p in self.processes if not p.is_alive()), None)

    def terminate(self, grace: float = 5.0) -> None:
        for p in self.processes:
            if p.is_alive():
                p.terminate()
        deadline = time.monotonic() + grace
        for p in self.processes:
            p.join(max(0.0, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join(1.0)


@contextlib.contextmanager
def _main_module_hidden() -> Iterator[None]:
    """`spawn` re-runs the parent's main script in each child unless it cannot find it. Our
    children need nothing from it, and a user script without an `if __name__ == "__main__"`
    guard would start engines recursively; so the script is hidden while children start."""
    main = sys.modules["__main__"]
    saved_file, saved_spec = getattr(main, "__file__", None), getattr(main, "__spec__", None)
    main.__dict__.pop("__file__", None)
    main.__spec__ = None
    try:
        yield
    finally:
        main.__spec__ = saved_spec
        if saved_file is not None:
            main.__file__ = saved_file


def _start(process: BaseProcess) -> None:
    with _main_module_hidden():
        process.start()


def launch_children(args: ServerArgs, startup_timeout: float = 900.0) -> Children:
    """Starts the scheduler (which loads the model) and the detokenizer; returns once both run.
    Raises EngineStartError with the scheduler's own error when loading fails."""
    ctx = mp.get_context("spawn")
    endpoints = ipc.Endpoints.fresh()
    parent_end, child_end = ctx.Pipe(duplex=False)
    scheduler = ctx.Process(
        target=run_scheduler_process, args=(args, endpoints, child_end), name="sglang-scheduler", daemon=True
    )
    _start(scheduler)
    child_end.close()
    deadline = time.monotonic() + startup_timeout
    while not parent_end.poll(0.2):
        if not scheduler.is_alive():
            raise EngineStartError(f"the scheduler process exited with code {scheduler.exitcode} while loading")
        if time.monotonic() > deadline:
            scheduler.kill()
            raise EngineStartError(f"the model did not load within {startup_timeout:.0f} s")
    try:
        status, *rest = parent_end.recv()
    except EOFError:
        scheduler.join(5)
        raise EngineStartError(f"the scheduler process exited with code {scheduler.exitcode} while loading") from None
    if status != "ok":
        scheduler.join(5)
        message, trace = rest
        logger.debug("scheduler start-up failure:\n%s", trace)
        raise EngineStartError(message)
    info: ReadyInfo = rest[0]
    detokenizer = ctx.Process(
        target=run_detokenizer_process,
        args=(info.tokenizer_path, endpoints, args.log_level),
        name="sglang-detokenizer",
        daemon=True,
    )
    _start(detokenizer)
    return Children(endpoints, info, [scheduler, detokenizer])
