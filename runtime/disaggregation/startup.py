"""Builds the side of prefill-decode disaggregation a server plays (`--disaggregation-mode`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sglang.runtime.disaggregation.decode import DecodeSide
from sglang.runtime.disaggregation.prefill import PrefillSide
from sglang.runtime.memory.kv_pages import KVPageIO

if TYPE_CHECKING:
    from sglang.runtime.scheduler.scheduler import Scheduler


def build_sides(scheduler: Scheduler) -> tuple[PrefillSide | None, DecodeSide | None]:
    """(prefill side, decode side): at most one is built; neither in mode `null`."""
    args, runner = scheduler.args, scheduler.runner
    if args.disaggregation_mode == "null":
        return None, None
    io = KVPageIO(runner, runner.attn_backend, runner.platform.runtime)
    if args.disaggregation_mode == "prefill":
        side = PrefillSide(args.host, args.disaggregation_bootstrap_port, io, runner.attn_backend, args.page_size)
        return side, None
    return None, DecodeSide(scheduler, io, runner.attn_backend)
