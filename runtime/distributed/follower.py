"""The process of a tensor-parallel rank other than 0: it loads its shard, reports readiness
through its pipe, then replays rank 0's model calls until rank 0 stops or is gone.

A follower never outlives the group: when rank 0 dies, or a peer does, its next collective
fails (the connection closes, or `--dist-timeout` passes) and the process exits with status 1
after logging why, so no rank is left waiting in a collective.
"""

from __future__ import annotations

import logging
import sys
import traceback
from multiprocessing.connection import Connection

from sglang.runtime.distributed.group import tp_group
from sglang.runtime.distributed.leader import follow
from sglang.runtime.distributed.placement import RankPlacement
from sglang.runtime.processes.child_setup import init_child_process
from sglang.runtime.processes.messages import ReadyReport, StartupFailure
from sglang.runtime.scheduler.process import build_runner
from sglang.runtime.server_args import ServerArgs

logger = logging.getLogger(__name__)


def run_follower_process(args: ServerArgs, placement: RankPlacement, ready: Connection) -> None:
    init_child_process(placement.name, args.log_level)
    try:
        _, runner = build_runner(args, placement)
    except Exception as e:
        ready.send(StartupFailure(f"{type(e).__name__}: {e}", traceback.format_exc()))
        return
    ready.send(ReadyReport())
    try:
        follow(runner, tp_group().comm)
    except Exception as e:  # torch.distributed raises RuntimeError subclasses for lost peers and timeouts
        logger.error("rank %d lost the other ranks, exiting: %s", placement.rank, e)
        sys.exit(1)
