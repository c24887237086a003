"""The cpu runtimes that make a decode bucket's step static: taped (the default), traced or compiled.

The captured step runner hands `capture_step` one bucket's decode step, which reads static ids,
positions and attention metadata buffers and updates the KV buffers in place.

- `TapedDecodeRuntime` is cpu's graph capture: the step runs once while its kernel calls are
  recorded into a step tape (`platforms/kernels/cpu_cpp/step_tape.py`), holding every tensor they
  read and wrote by reference, as a CUDA graph holds their addresses; a replay makes the same
  kernel calls from C++ into the same output buffers, with no Python, dispatch, allocation or
  view between them (that glue was a large share of a small model's batch-1 step:
  benchmarks/README.md, "Measured costs"). A step the tape cannot replay (another kernel family's
  ops, MLA) is traced instead, with the reason logged once.
- `TracedDecodeRuntime`: `torch.jit.trace` records the step's op sequence once, with the same
  tensors held by reference, and each replay runs that sequence in TorchScript's interpreter. The
  interpreter runs with its graph optimizations off: they may fold an op whose inputs are all
  recorded tensors into a constant, and the static buffers change between replays. Capturing a
  bucket takes a fraction of a second, so every batch size can be its own bucket.
  `torch.jit.trace` is deprecated; where a torch has none, a bucket's step replays the Python
  step itself over its static buffers (logged once): the same tokens, without the speed-up.
- `CompiledDecodeRuntime` (`SGLANG_CPU_COMPILE_DECODE=1`) compiles the step with inductor
  (`torch.compile`); a cold compile takes minutes on a small machine, and on 2 cores it ran
  slower than eager. Inductor's artifacts are kept under `$SGLANG_CACHE_DIR/inductor` (default
  `~/.cache/sglang/inductor`), so a second start recompiles from the cache.
"""

from __future__ import annotations

import functools
import logging
import os
import time
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from sglang.ops.step import StepOutput
from sglang.platforms.cache import cache_root
from sglang.platforms.cpu.platform import COMPILE_ENV
from sglang.platforms.device_runtime import BucketStep, DeviceRuntime

if TYPE_CHECKING:
    from sglang.platforms.kernels.cpu_cpp.tape_arena import TapeArena

logger = logging.getLogger(__name__)


class TracedDecodeRuntime(DeviceRuntime):
    def capture_step(self, step: BucketStep, kv_buffers: list[torch.Tensor]) -> BucketStep:
        # One eager run first: what a kernel builds on first use (the cpu_cpp linear's weight
        # records) is then built outside the capture, which would record only its result.
        step(kv_buffers)
        return self._capture(step, kv_buffers)

    def _capture(self, step: BucketStep, kv_buffers: list[torch.Tensor]) -> BucketStep:
        if getattr(torch.jit, "trace", None) is None:
            _log_untraced_once()
            return step
        started = time.perf_counter()
        with warnings.catch_warnings():
            # A tracer warning means the step read a tensor's value into Python, which the trace
            # would replay as a constant: fail the capture instead of replaying wrong steps.
            warnings.simplefilter("error", torch.jit.TracerWarning)
            warnings.filterwarnings("ignore", r".*torch\.jit\.trace.* is deprecated", DeprecationWarning)
            traced = torch.jit.trace(_tuple_step(step), (tuple(kv_buffers),), check_trace=False)
        logger.debug("traced a decode step in %.2f s", time.perf_counter() - started)

        def run(buffers: list[torch.Tensor]) -> StepOutput:
            with torch.jit.optimized_execution(False):
                logits, written = traced(tuple(buffers))
            return logits, list(written)

        return run


class TapedDecodeRuntime(TracedDecodeRuntime):
    def __init__(self) -> None:
        self._arena: TapeArena | None = None
        """The intermediate buffers every tape of this runtime shares (`TapeArena`), made at the
        first capture: replays never overlap, so one bucket's activations reuse another's bytes."""

    def _capture(self, step: BucketStep, kv_buffers: list[torch.Tensor]) -> BucketStep:
        from sglang.platforms.kernels.cpu_cpp.step_tape import Untapeable, record_tape
        from sglang.platforms.kernels.cpu_cpp.tape_arena import TapeArena

        if self._arena is None:
            self._arena = TapeArena()
        try:
            return record_tape(step, kv_buffers, self._arena)
        except Untapeable as reason:
            _log_untaped_once(str(reason))
        return super()._capture(step, kv_buffers)


@functools.cache
def _log_untaped_once(reason: str) -> None:
    logger.info("decode steps are traced, not taped: %s", reason)


@functools.cache
def _log_untraced_once() -> None:
    logger.warning(
        "torch %s has no torch.jit.trace: captured decode steps replay the Python step over their "
        "static buffers, untraced (same tokens, without the trace's speed-up); %s=1 compiles them "
        "with inductor instead",
        torch.__version__,
        COMPILE_ENV,
    )


TupleStep = Callable[[tuple[torch.Tensor, ...]], tuple[torch.Tensor, tuple[torch.Tensor, ...]]]


def _tuple_step(step: BucketStep) -> TupleStep:
    """`step` over tuples: the tracer takes a list's length as a property of the inputs (it warns)."""

    def traceable(buffers: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        logits, written = step(list(buffers))
        return logits, tuple(written)

    return traceable


class CompiledDecodeRuntime(DeviceRuntime):
    def capture_step(self, step: BucketStep, kv_buffers: list[torch.Tensor]) -> BucketStep:
        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_root("inductor")))
        # One eager run first, for the same reason as the traced runtime's.
        step(kv_buffers)
        compiled = torch.compile(step)
        started = time.perf_counter()
        compiled(kv_buffers)  # compile now, with this batch's real inputs (a padded step writes only scratch)
        logger.info("compiled a decode step in %.1f s", time.perf_counter() - started)

        def run(buffers: list[torch.Tensor]) -> StepOutput:
            return compiled(buffers)

        return run
