"""Decode steps padded to fixed batch buckets, each made static once and then replayed.

A decode batch of `n` rows runs as the smallest bucket `b >= n` of the `BucketPolicy`. Rows
`n..b` are padding: token 0 at position 0, one KV token in the scratch slot (`PADDING_SLOT`,
which the allocator never hands out), so their K/V writes land there and their logits are never
returned, hence never sampled. Sampling stays outside the static step.

How a bucket's step is made static is the device runtime's `capture_step`: a CUDA/NPU graph
captured once and replayed, a TorchScript trace (cpu), or an inductor-compiled function. Each
gets the same `BucketStep` and returns a callable of the same signature. The step reads its
inputs only from static buffers: token ids and positions owned here, and the attention metadata
the backend handed out for the bucket (`AttentionBackend.capture_metadata`), which
`replay_metadata` rewrites in place before every replay.

A speculative verify step (every extend in it a decode entry's last token plus its drafts) runs
as decode rows too, where the attention backend lets decode rows see each other
(`decode_rows_see_each_other`): an extend of `e` tokens becomes `e` rows over growing prefixes of
its slots, the same tokens, positions, new slots and causal visibility, so a verify step of `n`
tokens replays the `n`-row bucket instead of running eagerly.

Invariants: a bucket is captured at most once; between replays only buffer contents change,
never which tensors the step reads; a padded row never writes outside the scratch slot and its
logits never leave `run`; the logits `run` returns may be a view of the replay's output, which
the next replay overwrites (as the step contract allows); a step the static buffers cannot hold
(`CaptureLimits.admits`) runs eagerly and is counted in `stats.static_fallbacks`, so no schedule
can overflow them.
"""

from __future__ import annotations

import copy
import logging

import torch

from sglang.ops.attention import AttentionBackend, AttentionInputs, CaptureLimits
from sglang.ops.buckets import BucketPolicy
from sglang.ops.step import PADDING_SLOT, ForwardContext, StepInputs, StepOutput
from sglang.platforms.device_runtime import BucketStep, DeviceRuntime
from sglang.platforms.execution.eager import EagerStepRunner

logger = logging.getLogger(__name__)


def pad_decode(inputs: AttentionInputs, bucket: int) -> AttentionInputs:
    """`inputs` (decode rows) with `bucket - n` padded rows of one token in the scratch slot."""
    pad = bucket - len(inputs.seq_lens)
    if pad == 0:
        return inputs
    scratch = torch.full((pad,), PADDING_SLOT, dtype=inputs.kv_slots.dtype, device=inputs.kv_slots.device)
    return AttentionInputs(
        seq_lens=(*inputs.seq_lens, *(1,) * pad),
        extend_lens=(*inputs.extend_lens, *(1,) * pad),
        kv_slots=torch.cat([inputs.kv_slots, scratch]),
        window_slots=None if inputs.window_slots is None else torch.cat([inputs.window_slots, scratch]),
    )


def fill_padded(buffer: torch.Tensor, values: torch.Tensor, bucket: int) -> None:
    """`buffer[:bucket]` = `values` (on any device), then zeros for the padded rows."""
    rows = values.shape[0]
    buffer[:rows].copy_(values)
    if rows < bucket:
        buffer[rows:bucket].zero_()


def unroll_verify(step: StepInputs) -> AttentionInputs | None:
    """`step`'s attention as decode rows, each extend of `e` tokens as `e` rows over growing
    prefixes of its slots; None when a row is no verify entry (a prefill chunk: its extend is
    longer than the step's drafts account for) or extends nothing."""
    inputs = step.attention
    if inputs.window_slots is not None:  # unrolled rows would need unrolled window lists too
        return None
    if min(inputs.extend_lens) < 1 or sum(e - 1 for e in inputs.extend_lens) != step.draft_tokens:
        return None
    seq_lens: list[int] = []
    slots: list[torch.Tensor] = []
    kv_starts = inputs.kv_starts
    for i, (seq_len, extend) in enumerate(zip(inputs.seq_lens, inputs.extend_lens)):
        own = inputs.kv_slots[kv_starts[i] : kv_starts[i + 1]]
        for length in range(seq_len - extend + 1, seq_len + 1):
            seq_lens.append(length)
            slots.append(own[:length])
    return AttentionInputs(tuple(seq_lens), (1,) * len(seq_lens), torch.cat(slots))


class CapturedStepRunner:
    """Replays captured decode buckets; runs every other step through its eager runner.

    Built only when the backend accepted the limits (`disabled_reason` is None)."""

    def __init__(
        self, eager: EagerStepRunner, runtime: DeviceRuntime, policy: BucketPolicy, limits: CaptureLimits
    ) -> None:
        self.eager = eager
        self.runtime = runtime
        self.policy = policy
        self.limits = limits
        self.stats = eager.stats
        self.disabled_reason = eager.backend.init_capture(limits)
        self.input_ids = torch.zeros(policy.largest, dtype=torch.long, device=eager.device)
        self.positions = torch.zeros(policy.largest, dtype=torch.long, device=eager.device)
        self.lora_slots = torch.zeros(policy.largest, dtype=torch.long, device=eager.device)
        self.window_backend: AttentionBackend | None = None
        """Steps with window slots (`AttentionInputs.window_slots`): a copy of the backend whose
        own static buffers (its attributes, set by `init_capture`) hold the window pool's slot
        lists, made at the first such step. Metadata alone comes from it; the backend runs every
        layer."""
        self.first_rows = torch.arange(policy.largest, dtype=torch.long)
        """A plain decode step's `logit_rows` (every row, in order): its logits are then the first
        rows of the replay's own output, returned as they are (a copy of them cost more than the
        rest of the step's host work)."""
        self._replays: dict[tuple[int, bool], BucketStep] = {}
        """Per (bucket, with LoRA): a step captured with LoRA reads `lora_slots`; padded rows
        use slot 0 (no adapter). A step whose rows are all the base model's replays the one
        without LoRA."""

    def allocate_kv(self, shape: tuple[int, ...], dtype: torch.dtype, num_layers: int) -> list[torch.Tensor]:
        return self.eager.allocate_kv(shape, dtype, num_layers)

    def run(self, step: StepInputs, kv_buffers: list[torch.Tensor]) -> StepOutput:
        inputs = step.attention
        if step.draft_tokens and self.eager.backend.decode_rows_see_each_other:
            inputs = unroll_verify(step) or inputs
        bucket = self.policy.bucket_for(len(inputs.seq_lens)) if inputs.is_decode else None
        if bucket is None:
            return self.eager.run(step, kv_buffers)
        padded = pad_decode(inputs, bucket)
        if not self.limits.admits(padded):
            self.stats.static_fallbacks += 1
            return self.eager.run(step, kv_buffers)
        self.stats.static_steps += 1
        if padded.window_slots is not None and self.window_backend is None:
            self.window_backend = copy.copy(self.eager.backend)
            # Accepted: the backend itself accepted the same limits.
            self.window_backend.init_capture(self.limits)
        adapter_slots = step.adapter_slots
        with_lora = adapter_slots is not None
        fill_padded(self.input_ids, step.input_ids, bucket)
        fill_padded(self.positions, step.positions, bucket)
        if with_lora:
            fill_padded(self.lora_slots, adapter_slots, bucket)
        replay = self._replays.get((bucket, with_lora))
        if replay is None:
            replay = self._capture(bucket, padded, kv_buffers, with_lora)
        self.eager.backend.replay_metadata(bucket, padded)
        if self.window_backend is not None:
            self.window_backend.replay_metadata(bucket, padded.for_window())
        logits, kv_buffers = replay(kv_buffers)
        rows = step.logit_rows
        if torch.equal(rows, self.first_rows[: rows.numel()]):
            return logits[: rows.numel()], kv_buffers
        # index_select: advanced indexing takes a general path that costs more than the row copy
        return logits.index_select(0, rows.to(logits.device)), kv_buffers

    def _capture(
        self, bucket: int, padded: AttentionInputs, kv_buffers: list[torch.Tensor], with_lora: bool
    ) -> BucketStep:
        backend, model, window = self.eager.backend, self.eager.model, self.window_backend
        metadata = backend.capture_metadata(bucket)
        window_metadata = window.capture_metadata(bucket) if window is not None else None
        # Capturing may run the step (CUDA graphs warm up eagerly): give it this batch's real inputs.
        backend.replay_metadata(bucket, padded)
        if window is not None:
            window.replay_metadata(bucket, padded.for_window())
        ids, positions = self.input_ids[:bucket], self.positions[:bucket]
        lora_slots = self.lora_slots[:bucket] if with_lora else None

        def step(buffers: list[torch.Tensor]) -> StepOutput:
            ctx = ForwardContext(backend, metadata, list(buffers), lora_slots, window_metadata)
            return model.compute_logits(model(ids, positions, ctx)), ctx.kv_buffers

        replay = self.runtime.capture_step(step, kv_buffers)
        self._replays[(bucket, with_lora)] = replay
        self.stats.captured_buckets.append(bucket)
        logger.info("decode bucket %d captured (%s)", bucket, type(self.runtime).__name__)
        return replay
