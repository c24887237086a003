"""Decode steps padded to fixed batch buckets, each made static once and then replayed.

A decode batch of `n` rows runs as the smallest bucket `b >= n` of the shared `BucketPolicy`.
Rows `n..b` are padding: token 0 at position 0, one KV token in the scratch slot
(`PADDING_SLOT`, which the allocator never hands out), so their K/V writes land there and their
logits are never returned, hence never sampled. Sampling stays outside the static step.

How a bucket's step is made static is the platform's choice, through a `StepCapturer`: a device
runtime with graphs captures it once and replays the graph (CUDA graphs), a runtime that defines
`capture_step` itself may return a traced function (TorchScript on cpu; inductor with
`SGLANG_CPU_COMPILE_DECODE=1`) or a jitted one (JAX on tpu). Every capturer gets the same
`BucketStep` and must return a callable of the same signature. The step reads its inputs only
from static buffers: token ids and positions owned here, and the attention metadata the backend
handed out for the bucket (`AttentionBackend.capture_metadata`), which `replay_metadata`
rewrites in place before every replay.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol, runtime_checkable

import torch

from sglang.ops.attention import AttentionBackend, AttentionInputs, CaptureLimits
from sglang.platforms.device_runtime import DeviceRuntime
from sglang.runtime.batch_buckets import BucketPolicy
from sglang.runtime.forward_context import ForwardContext
from sglang.runtime.memory.token_allocator import PADDING_SLOT
from sglang.runtime.models.decoder import DecoderForCausalLM

logger = logging.getLogger(__name__)

StepOutput = tuple[torch.Tensor, list[torch.Tensor]]
BucketStep = Callable[[list[torch.Tensor]], StepOutput]
"""One bucket's step: KV buffers in; float32 logits of every padded row `[bucket, V]` and the KV
buffers it wrote out (the same tensors on in-place devices, new ones on functional devices)."""


@runtime_checkable
class StepCapturer(Protocol):
    def capture_step(self, step: BucketStep, kv_buffers: list[torch.Tensor]) -> BucketStep:
        """Makes `step` static for the buffers it is first called with; may run it to do so."""


class RuntimeGraphCapturer:
    """Captures through the device runtime's `capture_graph` (a CUDA graph): the graph wrote the
    KV buffers it was captured with, in place, so a replay must be handed those same tensors."""

    def __init__(self, runtime: DeviceRuntime) -> None:
        self.runtime = runtime

    def capture_step(self, step: BucketStep, kv_buffers: list[torch.Tensor]) -> BucketStep:
        captured = list(kv_buffers)
        replay = self.runtime.capture_graph(lambda: step(captured))

        def run(buffers: list[torch.Tensor]) -> StepOutput:
            if len(buffers) != len(captured) or any(a is not b for a, b in zip(buffers, captured)):
                raise RuntimeError("a captured graph replays only over the KV buffers it was captured with")
            return replay()

        return run


def step_capturer(runtime: DeviceRuntime) -> StepCapturer | None:
    """The platform's way to make a step static: its runtime's own `capture_step` (compiled or
    jitted functions), else graph capture where the runtime has graphs, else None (eager only)."""
    if isinstance(runtime, StepCapturer):
        return runtime
    if runtime.supports_graphs:
        return RuntimeGraphCapturer(runtime)
    return None


def pad_decode(inputs: AttentionInputs, bucket: int) -> AttentionInputs:
    """`inputs` (decode rows) with `bucket - n` padded rows of one token in the scratch slot."""
    pad = bucket - len(inputs.seq_lens)
    scratch = torch.full((pad,), PADDING_SLOT, dtype=inputs.kv_slots.dtype, device=inputs.kv_slots.device)
    return AttentionInputs(
        seq_lens=(*inputs.seq_lens, *(1,) * pad),
        extend_lens=(*inputs.extend_lens, *(1,) * pad),
        kv_slots=torch.cat([inputs.kv_slots, scratch]),
    )


class GraphRunner:
    """Runs eligible decode steps through one static step per bucket, captured on first use.

    Invariants: a bucket is captured at most once; between replays only buffer contents change
    (ids, positions, attention metadata), never which tensors the step reads; a padded row never
    writes outside the scratch slot and its logits never leave `run`.
    """

    def __init__(
        self,
        model: DecoderForCausalLM,
        backend: AttentionBackend,
        capturer: StepCapturer,
        policy: BucketPolicy,
        limits: CaptureLimits,
        device: torch.device,
    ) -> None:
        self.model = model
        self.backend = backend
        self.capturer = capturer
        self.policy = policy
        self.limits = limits
        self.disabled_reason = backend.init_capture(limits)
        self.input_ids = torch.zeros(policy.largest, dtype=torch.long, device=device)
        self.positions = torch.zeros(policy.largest, dtype=torch.long, device=device)
        self._replays: dict[int, BucketStep] = {}

    @property
    def captured_buckets(self) -> tuple[int, ...]:
        return tuple(sorted(self._replays))

    def bucket_for(self, inputs: AttentionInputs) -> int | None:
        """The bucket this step runs in, or None when it runs eagerly (not a pure decode, larger
        than every bucket, longer than the static tables, or the backend cannot be captured)."""
        if self.disabled_reason is not None or not inputs.is_decode:
            return None
        bucket = self.policy.bucket_for(len(inputs.seq_lens))
        if bucket is None or not self.limits.admits(pad_decode(inputs, bucket)):
            return None
        return bucket

    def run(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        inputs: AttentionInputs,
        logit_rows: torch.Tensor,
        kv_buffers: list[torch.Tensor],
        bucket: int,
    ) -> StepOutput:
        """Logits of `logit_rows` (real rows only) and the KV buffers to use next."""
        rows = len(inputs.seq_lens)
        padded = pad_decode(inputs, bucket)
        self.input_ids[:rows].copy_(input_ids)
        self.input_ids[rows:bucket].zero_()
        self.positions[:rows].copy_(positions)
        self.positions[rows:bucket].zero_()
        replay = self._replays.get(bucket)
        if replay is None:
            replay = self._capture(bucket, padded, kv_buffers)
        self.backend.replay_metadata(bucket, padded)
        logits, kv_buffers = replay(kv_buffers)
        return logits[logit_rows.to(logits.device)], kv_buffers

    def _capture(self, bucket: int, padded: AttentionInputs, kv_buffers: list[torch.Tensor]) -> BucketStep:
        metadata = self.backend.capture_metadata(bucket)
        # Capturing may run the step (CUDA graphs warm up eagerly): give it this batch's real inputs.
        self.backend.replay_metadata(bucket, padded)
        ids, positions = self.input_ids[:bucket], self.positions[:bucket]

        def step(buffers: list[torch.Tensor]) -> StepOutput:
            ctx = ForwardContext(self.backend, metadata, list(buffers))
            hidden = self.model(ids, positions, ctx)
            return self.model.compute_logits(hidden), ctx.kv_buffers

        replay = self.capturer.capture_step(step, kv_buffers)
        self._replays[bucket] = replay
        logger.info("decode bucket %d captured (%s)", bucket, type(self.capturer).__name__)
        return replay
