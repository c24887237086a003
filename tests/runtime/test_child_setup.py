"""Once a process is ready, the objects of its start-up leave the collector's reach."""

from __future__ import annotations

import gc

from sglang.runtime.processes.child_setup import freeze_startup_objects


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
