"""What every child process of the engine does first."""

from __future__ import annotations

import logging
import signal
import sys


def init_child_process(name: str, log_level: str) -> None:
    """Logs tagged with the process name; SIGINT ignored (a terminal's Ctrl-C reaches the whole
    process group, and the parent decides how to stop); SIGTERM exits cleanly, so that
    finalizers release what the process holds (semaphores, sockets)."""
    logging.basicConfig(level=log_level.upper(), format=f"[{name}] %(asctime)s %(levelname)s %(name)s: %(message)s")
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _exit_once)


def _exit_once(signum: int, frame: object) -> None:
    # Later SIGTERMs (the parent stops its children more than once on the way out) would raise
    # SystemExit again inside the finalizers the first one runs, which Python prints as
    # "Exception ignored ... SystemExit: 0" tracebacks.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.exit(0)
