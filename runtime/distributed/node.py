"""`sglang serve --node-rank K` for K > 0: this node's tensor-parallel ranks and nothing else.

Node 0 serves HTTP and holds rank 0, which schedules for every rank; another node only runs its
ranks, which follow rank 0's commands. The command returns when its ranks end: when rank 0
stops or dies they exit (their next collective fails), so the node never outlives the server.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import signal
import sys
from multiprocessing.connection import wait

from sglang.runtime.distributed.placement import node_placements
from sglang.runtime.processes.launch import Children, await_ready, start_followers
from sglang.runtime.server_args import ServerArgs

logger = logging.getLogger(__name__)


def serve_follower_node(args: ServerArgs, startup_timeout: float = 900.0) -> int:
    placements = node_placements(args)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # so the ranks are terminated below
    followers = start_followers(mp.get_context("spawn"), args, placements)
    processes = [process for process, _ in followers]
    try:
        await_ready(followers, startup_timeout)
        logger.info("node %d: ranks %s ready, following rank 0", args.node_rank, [p.rank for p in placements])
        wait([process.sentinel for process in processes])
        ended = next(process for process in processes if not process.is_alive())
        logger.info("node %d: %s exited with code %s", args.node_rank, ended.name, ended.exitcode)
        return 0 if ended.exitcode == 0 else 1
    finally:
        Children(None, None, processes).terminate()  # type: ignore[arg-type]
