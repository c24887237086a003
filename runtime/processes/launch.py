"""Starting the engine's child processes (scheduler, detokenizer, and under tensor parallelism
this node's other ranks) and watching them.

Children start with the `spawn` method: the parent may already hold threads (an event loop,
torch's pools) that `fork` would copy in a broken state. Each child runs `run_entry_point`, so the
parent imports none of the children's code; and the detokenizer starts beside the scheduler and
waits for the tokenizer's folder (known once the model is resolved), so its imports overlap the
model's loading instead of following it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import multiprocessing as mp
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.context import SpawnContext
from multiprocessing.process import BaseProcess
from multiprocessing.sharedctypes import Synchronized

from sglang.runtime.distributed.placement import RankPlacement, node_placements
from sglang.runtime.processes import ipc
from sglang.runtime.processes.child_setup import run_entry_point
from sglang.runtime.processes.messages import ReadyInfo, ReadyReport, StartupFailure
from sglang.runtime.processes.openmp_spin import bounded_openmp_spin
from sglang.runtime.processes.step_monitor import StepMonitor
from sglang.runtime.server_args import ServerArgs

logger = logging.getLogger(__name__)

SCHEDULER = "sglang.runtime.scheduler.process:run_scheduler_process"
FOLLOWER = "sglang.runtime.distributed.follower:run_follower_process"
DETOKENIZER = "sglang.runtime.processes.detokenizer:run_detokenizer_process"


class EngineStartError(RuntimeError):
    pass


@dataclass
class Children:
    endpoints: ipc.Endpoints
    info: ReadyInfo
    processes: list[BaseProcess]
    """The scheduler first."""
    step_clock: Synchronized
    """Start time of the scheduler's current step (0 while idle), written by its `StepHeartbeat`."""

    def supervise(
        self, loop: asyncio.AbstractEventLoop, on_dead: Callable[[str], None], step_timeout_s: float
    ) -> Callable[[], None]:
        """Calls `on_dead` on `loop` with the reason the engine died: a child exited, or the
        scheduler hung in one step for `step_timeout_s` (it is then killed, and the hang is the
        reason given first). Returns the function that stops watching; call it on `loop`."""
        for process in self.processes:

            def exited(process: BaseProcess = process) -> None:
                loop.remove_reader(process.sentinel)
                process.join(1)  # the sentinel says it ended; reaping it gives the exit code
                on_dead(f"the {process.name} process exited unexpectedly (exit code {process.exitcode})")

            loop.add_reader(process.sentinel, exited)
        on_hang = functools.partial(loop.call_soon_threadsafe, on_dead)
        monitor = StepMonitor(self.step_clock, self.processes[0], step_timeout_s, on_hang).start()

        def stop() -> None:
            monitor.stop()
            for process in self.processes:
                loop.remove_reader(process.sentinel)

        return stop

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


@contextlib.contextmanager
def _interrupts_deferred() -> Iterator[None]:
    """A SIGINT that arrives while the block runs is acted on once it ends. `start()` writes the
    child's start-up data down a pipe; a KeyboardInterrupt in the middle of that write leaves the
    child reading half of it and printing an EOFError traceback. Deferred, the interrupt comes
    once the child has all of it, and the parent stops a whole child.

    The signal is also blocked in this thread, a mask the child inherits through `exec`: a
    terminal's Ctrl-C reaches the whole process group, and a child still importing would print
    a KeyboardInterrupt traceback. The child ignores SIGINT once `init_child_process` runs, which
    discards the pending one."""
    if threading.current_thread() is not threading.main_thread():
        yield  # Python runs signal handlers in the main thread only; none interrupts this one.
        return
    received: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        signal.signal(signal.SIGINT, previous)
        if received:
            signal.raise_signal(signal.SIGINT)


def _start(process: BaseProcess) -> None:
    with _main_module_hidden(), bounded_openmp_spin(), _interrupts_deferred():
        process.start()


def start_followers(
    ctx: SpawnContext, args: ServerArgs, placements: list[RankPlacement]
) -> list[tuple[BaseProcess, Connection]]:
    """One process per tensor-parallel rank in `placements` (none of them rank 0)."""
    started = []
    for placement in placements:
        parent_end, child_end = ctx.Pipe(duplex=False)
        process = ctx.Process(
            target=run_entry_point,
            args=(FOLLOWER, args, placement, child_end),
            name=f"sglang-{placement.name}",
            daemon=True,
        )
        _start(process)
        child_end.close()
        started.append((process, parent_end))
    return started


def await_ready(ranks: list[tuple[BaseProcess, Connection]], timeout: float) -> list[ReadyReport]:
    """Each process's `ReadyReport`, in order, once all are ready. If any fails, the others are
    killed and EngineStartError names every failure reported meanwhile (a rank that fails to load
    makes its peers fail too, but the first cause is among them)."""
    deadline = time.monotonic() + timeout
    reports: dict[int, ReadyReport] = {}
    errors: list[str] = []
    while len(reports) < len(ranks) and not errors:
        for i, (process, pipe) in enumerate(ranks):
            if i in reports:
                continue
            if pipe.poll(0.1):
                try:
                    report = pipe.recv()
                except EOFError:
                    report = StartupFailure(f"exited with code {process.exitcode} while loading", "")
                if isinstance(report, ReadyReport):
                    reports[i] = report
                else:
                    logger.debug("%s start-up failure:\n%s", process.name, report.traceback)
                    errors.append(f"{process.name}: {report.message}" if len(ranks) > 1 else report.message)
            elif not process.is_alive():
                process.join(1)
                errors.append(f"the {process.name} process exited with code {process.exitcode} while loading")
        if time.monotonic() > deadline:
            errors.append(f"the model did not load within {timeout:.0f} s")
    if errors:
        time.sleep(0.5 if len(ranks) > 1 else 0)  # the peers' own reports, if they come at once
        for process, pipe in ranks:
            with contextlib.suppress(EOFError, OSError):
                if pipe.poll(0) and isinstance(report := pipe.recv(), StartupFailure):
                    errors.append(f"{process.name}: {report.message}")
            if process.is_alive():
                process.kill()
            process.join(5)
        raise EngineStartError("; ".join(dict.fromkeys(errors)))
    return [reports[i] for i in range(len(ranks))]


def launch_children(args: ServerArgs, startup_timeout: float = 900.0) -> Children:
    """Starts the scheduler (which loads the model; rank 0 under tensor parallelism), this node's
    other ranks and the detokenizer; returns once all run. Raises EngineStartError with the
    processes' own errors when loading fails."""
    ctx = mp.get_context("spawn")
    endpoints = ipc.Endpoints.fresh()
    placements = node_placements(args)
    parent_end, child_end = ctx.Pipe(duplex=False)
    step_clock = ctx.Value("d", 0.0, lock=False)
    scheduler = ctx.Process(
        target=run_entry_point,
        args=(SCHEDULER, args, endpoints, child_end, step_clock, placements[0] if placements else None),
        name="sglang-scheduler",
        daemon=True,
    )
    _start(scheduler)
    child_end.close()
    # From here on every started child is killed if anything, Ctrl-C included, stops the start.
    started: list[BaseProcess] = [scheduler]
    folder_sender: Connection | None = None
    try:
        followers = start_followers(ctx, args, placements[1:])
        started.extend(process for process, _ in followers)
        folder_for_child, folder_sender = ctx.Pipe(duplex=False)
        detokenizer = ctx.Process(
            target=run_entry_point,
            args=(DETOKENIZER, folder_for_child, endpoints, args.log_level, args.trace_config("detokenizer")),
            name="sglang-detokenizer",
            daemon=True,
        )
        _start(detokenizer)
        started.append(detokenizer)
        folder_for_child.close()
        info = await_ready([(scheduler, parent_end), *followers], startup_timeout)[0].info
        assert info is not None, "the scheduler's report carries its ReadyInfo"
        folder_sender.send(info.tokenizer_path)
    except BaseException:
        # A child busy in native code would not see a SIGTERM soon, and nothing else would reap
        # it. (A detokenizer started but not yet listed ends by itself: its pipe closes.)
        for process in started:
            if process.is_alive():
                process.kill()
            process.join(5)
        raise
    finally:
        if folder_sender is not None:
            folder_sender.close()
    processes = [scheduler, detokenizer, *(process for process, _ in followers)]
    return Children(endpoints, info, processes, step_clock)
