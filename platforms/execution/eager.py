"""Eager steps: plan the attention metadata, run the model, take the logits. The fallback of every
other runner, and the whole runner where nothing makes steps static."""

from __future__ import annotations

import torch

from sglang.ops.attention import AttentionBackend
from sglang.ops.step import ForwardContext, StepInputs, StepModel, StepOutput, StepStats


class EagerStepRunner:
    def __init__(self, model: StepModel, backend: AttentionBackend, device: torch.device) -> None:
        self.model = model
        self.backend = backend
        self.device = device
        self.stats = StepStats()

    def allocate_kv(self, shape: tuple[int, ...], dtype: torch.dtype, num_layers: int) -> list[torch.Tensor]:
        # Uninitialized: no kernel reads a slot before writing it (op parity fills free slots
        # with NaN to hold them to that), and on the host an allocation this large is mapped
        # lazily, so resident memory follows the tokens the pool has held, not its capacity.
        return [torch.empty(shape, dtype=dtype, device=self.device) for _ in range(num_layers)]

    def run(self, step: StepInputs, kv_buffers: list[torch.Tensor]) -> StepOutput:
        self.stats.eager_steps += 1
        adapter_slots = step.adapter_slots
        lora_slots = adapter_slots.to(self.device) if adapter_slots is not None else None
        inputs = step.attention
        ctx = ForwardContext(self.backend, self.backend.plan(inputs), list(kv_buffers), lora_slots)
        if inputs.window_slots is not None:
            ctx.window_metadata = self.backend.plan(inputs.for_window())
        hidden = self.model(step.input_ids.to(self.device), step.positions.to(self.device), ctx)
        return self.model.compute_logits(hidden[step.logit_rows.to(self.device)]), ctx.kv_buffers
