"""How long the engine's children let idle OpenMP threads spin before they sleep.

torch's host kernels run in an OpenMP team (libgomp in torch's Linux wheels). Between parallel
regions a worker spins, waiting for the next one, and only then sleeps. libgomp spins 300,000
rounds by default (milliseconds), or 100 once a process has more OpenMP threads than CPUs. On a
machine whose cores other processes also want, a long spin is the worst case: the spinning
thread holds a core while the thread it waits for is not running, so every parallel region can
cost a time slice. Measured (benchmarks/README.md, "The restart row: the restarted server's
spinning"): a storage-restored server at load ~5 on 2 cores took 1.2-1.8 s a decode step and
0.71 s of CPU, never sleeping (0 voluntary context switches a step); the server that filled
the storage took 0.19-0.36 s, because its storage writer's copies had made a second team, over
the CPU count, so libgomp spun only 100 rounds. The restored server's step took 0.39 s with
this bound (0.31 s with `OMP_WAIT_POLICY=passive`, which never spins).

`GOMP_SPINCOUNT` is read when libgomp loads, so it is set for children as they are spawned,
never for a running process. What a user sets (`GOMP_SPINCOUNT`, or `OMP_WAIT_POLICY`, which
decides it) is left alone.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

SPIN_ENV = "GOMP_SPINCOUNT"
WAIT_POLICY_ENV = "OMP_WAIT_POLICY"
CHILD_SPIN_COUNT = "10000"
"""About 0.1-0.5 ms of spinning: longer than the gaps between a step's parallel regions on an
idle machine (microseconds), so an idle machine's workers still catch the next region spinning,
and far shorter than a scheduler time slice, which is what a loaded machine's spin wasted."""


@contextlib.contextmanager
def bounded_openmp_spin() -> Iterator[None]:
    """While open, processes spawned from this one get `CHILD_SPIN_COUNT` unless the user chose
    a spin count or wait policy; this process's own environment is as it was afterwards."""
    if SPIN_ENV in os.environ or WAIT_POLICY_ENV in os.environ:
        yield
        return
    os.environ[SPIN_ENV] = CHILD_SPIN_COUNT
    try:
        yield
    finally:
        os.environ.pop(SPIN_ENV, None)
