"""Hang detection for the scheduler, watched from the parent process by heartbeat.

The scheduler writes the start time of its current step into shared memory (`StepHeartbeat`),
and 0 while it idles. The parent's `StepMonitor` thread reads it: a step older than
`--watchdog-timeout` means the scheduler hangs, and the monitor SIGKILLs it. A thread inside
the scheduler could not do this: a native call (a kernel, an XLA compile) that holds the
interpreter lock stops every thread of that process, the watchdog's included.

What follows a kill is the launcher's ordinary handling of a dead child: every pending request
fails with 503 (`EngineDeadError`), and `sglang serve` exits with status 1 so that a supervisor
(systemd, Kubernetes, smg's health checks) restarts it.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from multiprocessing.process import BaseProcess
from multiprocessing.sharedctypes import Synchronized

logger = logging.getLogger(__name__)

IDLE = 0.0


class StepHeartbeat:
    """The scheduler's side: `beat()` as a step starts, `idle()` when there is nothing to do.
    `time.monotonic` is the system-wide monotonic clock, the same in parent and child."""

    def __init__(self, shared: Synchronized) -> None:
        self.shared = shared

    def beat(self) -> None:
        self.shared.value = time.monotonic()

    def idle(self) -> None:
        self.shared.value = IDLE


class StepMonitor:
    """The parent's side: kills `process` when one step has run longer than `timeout_s`, and
    reports why through `on_hang` (before the kill, so the first reason given is the hang)."""

    def __init__(
        self, shared: Synchronized, process: BaseProcess, timeout_s: float, on_hang: Callable[[str], None]
    ) -> None:
        self.shared = shared
        self.process = process
        self.timeout_s = timeout_s
        self.on_hang = on_hang
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="sglang-step-monitor", daemon=True)

    def start(self) -> StepMonitor:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()

    def _watch(self) -> None:
        interval = min(1.0, self.timeout_s / 4)
        while not self._stopped.wait(interval) and self.process.is_alive():
            started = self.shared.value
            if started != IDLE and time.monotonic() - started > self.timeout_s:
                reason = f"a scheduler step ran for over {self.timeout_s:g} s (--watchdog-timeout): killed it"
                logger.error("%s", reason)
                self.on_hang(reason)
                if self.process.pid is not None:
                    os.kill(self.process.pid, signal.SIGKILL)
                return
