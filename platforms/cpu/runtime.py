"""The cpu runtime that compiles decode steps (`SGLANG_CPU_COMPILE_DECODE=1`).

The graph runner hands `capture_step` one bucket's decode step (static ids, positions and
attention metadata buffers); it comes back compiled by inductor (`torch.compile`), so a bucket's
step runs without Python op dispatch and with its elementwise ops fused. The KV buffers are
updated in place, as in the eager step. Every bucket's step is the same function, so after two
bucket sizes dynamo marks the batch dimension dynamic and later buckets reuse that graph: a few
compilations serve every bucket. Inductor's artifacts are kept under
`$SGLANG_CACHE_DIR/inductor` (default `~/.cache/sglang/inductor`), so a second start recompiles
from the cache (tracing only) instead of generating and building C++ again.
"""

from __future__ import annotations

import logging
import os
import time

import torch

from sglang.platforms.device_runtime import DeviceRuntime
from sglang.runtime.graph_runner import BucketStep, StepOutput
from sglang.runtime.loader.cache import cache_root

logger = logging.getLogger(__name__)


class CompiledDecodeRuntime(DeviceRuntime):
    def capture_step(self, step: BucketStep, kv_buffers: list[torch.Tensor]) -> BucketStep:
        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_root("inductor")))
        # One eager run first: work a kernel does on first use (the cpu_quant linear's weight
        # records) then happens outside tracing, which cannot follow it.
        step(kv_buffers)
        compiled = torch.compile(step)
        started = time.perf_counter()
        compiled(kv_buffers)  # compile now, with this batch's real inputs (a padded step writes only scratch)
        logger.info("compiled a decode step in %.1f s", time.perf_counter() - started)

        def run(buffers: list[torch.Tensor]) -> StepOutput:
            return compiled(buffers)

        return run
