"""The tpu platform: the same torch models run on JAX through torchax, as jitted steps.

Runtime-side tensors (batches, logits, the torch module that is the model's program) stay on the
host; the step runner (`jit_step`) holds the weights and KV buffers as JAX arrays and runs each
step as one jitted function of them, the KV buffers donated and replaced by the written ones.
The platform runs on a TPU, or on XLA:CPU when `JAX_PLATFORMS=cpu` (labelled so everywhere).
"""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import torch

from sglang.ops.selection import OpTable
from sglang.platforms.base import Availability, Capabilities, ModelFacts, Platform, StepExecution, StepMode
from sglang.platforms.tpu.backend import JAX_PLATFORMS_ENV, backend_label, tpu_devices, xla_cpu_requested

if TYPE_CHECKING:
    from sglang.ops.attention import AttentionBackend
    from sglang.ops.buckets import BucketPolicy
    from sglang.ops.step import StepModel, StepRunner


class TpuPlatform(Platform):
    name = "tpu"
    # The runtime's tensors are host tensors; JAX arrays live inside the step runner.
    device_type = "cpu"
    dispatch_key = "CPU"
    capabilities = Capabilities(
        # fp16 is not a TPU type. bf16 is served (--dtype bfloat16) and as precise as torch's bf16
        # (dots and attention accumulate in fp32; XLA keeps excess precision where torch rounds
        # each op to bf16): its logits differ from the cpu platform's bf16 ones by up to about 1,
        # as both differ from fp32, so greedy text parts ways at near-ties (tests/tpu/test_bf16).
        # fp32 stays the default: one declaration serves XLA:CPU, where bf16 decode steps are much
        # slower than fp32 ones (this CPU has no bf16 arithmetic) and fp32 is what cross-device
        # token-for-token checks need, and TPUs, where no run has yet measured bf16.
        dtypes=frozenset({torch.float32, torch.bfloat16}),
        default_dtype=torch.float32,
        steps=StepExecution(StepMode.JITTED),
    )
    kernel_families = ("jax",)
    runtime_class = "sglang.platforms.tpu.runtime:TpuRuntime"
    # Collectives are XLA's, issued through JAX, not a torch.distributed backend.
    distributed_backend = "xla"

    @classmethod
    def availability(cls) -> Availability:
        for package in ("jax", "torchax"):
            if importlib.util.find_spec(package) is None:
                return Availability.no(f"{package} is not installed (pip install 'sglang-hal[tpu]')")
        if xla_cpu_requested():
            return Availability.yes()
        try:
            devices = tpu_devices()
        except Exception as exc:  # jax raises RuntimeError naming the backends it did find
            first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            return Availability.no(
                f"no TPU device visible ({first_line}); {JAX_PLATFORMS_ENV}=cpu runs the tpu platform on XLA:CPU"
            )
        return Availability.yes() if devices else Availability.no("no TPU device visible")

    def describe(self) -> str:
        return backend_label() if self.is_available() else f"{self.name} (unavailable)"

    def select_ops(
        self,
        facts: ModelFacts,
        overrides: Mapping[str, str] | None = None,
        force_reference: bool | None = None,
        assume_missing: Sequence[str] = (),
    ) -> OpTable:
        """The base table, headed by the backend it runs on (`tpu platform on XLA:CPU`)."""
        table = super().select_ops(facts, overrides, force_reference, assume_missing)
        return table if table.header else dataclasses.replace(table, header=self.describe())

    def jitted_step_runner(
        self, model: StepModel, backend: AttentionBackend, buckets: BucketPolicy | None
    ) -> StepRunner:
        from sglang.platforms.tpu.jit_step import JitStepRunner

        return JitStepRunner(model, backend, buckets, self.describe())
