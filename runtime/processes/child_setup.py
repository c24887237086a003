"""What every process of the engine does as it starts, and once it is ready to serve."""

from __future__ import annotations

import contextlib
import gc
import importlib
import logging
import signal
import sys


def init_child_process(name: str, log_level: str) -> None:
    """Logs tagged with the process name; SIGINT ignored (a terminal's Ctrl-C reaches the whole
    process group, and the parent decides how to stop); SIGTERM exits cleanly, so that
    finalizers release what the process holds (semaphores, sockets). On Linux the process is
    named `sgl-<name>` (what `top`, `ps -L` and /proc/<pid>/comm show; threads started later
    inherit it), as upstream titles its processes `sglang::<name>`."""
    _set_thread_name(f"sgl-{name}")
    logging.basicConfig(level=log_level.upper(), format=f"[{name}] %(asctime)s %(levelname)s %(name)s: %(message)s")
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _exit_once)


def _set_thread_name(name: str) -> None:
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_name = 15  # linux/prctl.h; the kernel keeps the first 15 bytes
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_name, name.encode()[:15], 0, 0, 0)


def _exit_once(signum: int, frame: object) -> None:
    # Later SIGTERMs (the parent stops its children more than once on the way out) would raise
    # SystemExit again inside the finalizers the first one runs, which Python prints as
    # "Exception ignored ... SystemExit: 0" tracebacks.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.exit(0)


def run_entry_point(entry_point: str, *args: object) -> None:
    """Runs `entry_point` ("package.module:function") with `args`: the target of every spawned
    child. The parent names the function instead of importing it, so it never imports what only
    a child runs (the scheduler's model code, xgrammar); each child imports its own entry point
    anyway, and the parent's import of it delayed every child's start."""
    module, _, function = entry_point.partition(":")
    getattr(importlib.import_module(module), function)(*args)


def freeze_startup_objects() -> None:
    """Collects once, then moves every object alive after start-up (modules, the model's and the
    app's Python objects) out of the collector's reach: a full collection during a request then
    walks only what requests made, not the import graph's objects (benchmarks/README.md,
    "bench_ttft.py", has the cost of one such collection). Call it once a process is ready to
    serve; objects it frees later are freed by reference counting as before (only cycles among
    frozen objects stay)."""
    gc.collect()
    gc.freeze()
