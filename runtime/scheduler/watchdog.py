"""Ends the scheduler process when one step hangs, so the engine fails loudly instead of
leaving every request waiting: the parent sees the process exit and fails what is pending."""

from __future__ import annotations

import logging
import os
import threading
import time

logger = logging.getLogger(__name__)


class StepWatchdog:
    """`beat()` before each step and `idle()` when there is nothing to do; a step that runs longer
    than `timeout_s` exits the process with status 3."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._started: float | None = None
        threading.Thread(target=self._watch, name="scheduler-watchdog", daemon=True).start()

    def beat(self) -> None:
        self._started = time.monotonic()

    def idle(self) -> None:
        self._started = None

    def _watch(self) -> None:
        while True:
            time.sleep(min(1.0, self.timeout_s / 4))
            started = self._started
            if started is not None and time.monotonic() - started > self.timeout_s:
                logger.error("a scheduler step has run for over %.0f s: exiting (watchdog)", self.timeout_s)
                os._exit(3)
