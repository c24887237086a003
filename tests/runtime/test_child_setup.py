"""How the engine's children start: named after their role, and once ready, the objects of
their start-up out of the collector's reach."""

from __future__ import annotations

import gc
import multiprocessing
import sys
from pathlib import Path

import pytest

from sglang.runtime.processes.child_setup import freeze_startup_objects, init_child_process


def test_freeze_moves_live_objects_to_the_permanent_generation() -> None:
    cycle: list[object] = []
    cycle.append(cycle)
    del cycle  # garbage of start-up: collected before the freeze, not kept forever
    try:
        freeze_startup_objects()
        assert gc.get_freeze_count() > 1000
        assert gc.collect() == 0  # the frozen cycle-free heap gives nothing back
    finally:
        gc.unfreeze()


def _name_of_a_started_child(queue: multiprocessing.Queue) -> None:
    init_child_process("detokenizer", "warning")
    queue.put(Path("/proc/self/comm").read_text().strip())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process names are set on Linux only")
def test_a_child_is_named_after_its_role() -> None:
    """What `top` and `ps` show for each of the engine's children (15 bytes at most)."""
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    child = ctx.Process(target=_name_of_a_started_child, args=(queue,))
    child.start()
    try:
        assert queue.get(timeout=60) == "sgl-detokenizer"
    finally:
        child.join(timeout=60)
