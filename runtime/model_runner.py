"""Runs one forward step of a model over a packed batch, on the selected platform.

The runner owns the KV buffers (one per layer, in the layout the attention backend declares)
and the attention backend; the scheduler owns which slots belong to whom.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from sglang import ops
from sglang.ops.attention import AttentionInputs
from sglang.platforms.base import Platform
from sglang.runtime.forward_context import ForwardContext
from sglang.runtime.models.decoder import DecoderForCausalLM

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class StepInputs:
    """One step's packed batch. `logit_rows` selects the token rows whose logits are needed
    (each sequence's last token, plus prompt tokens whose logprobs were asked for)."""

    input_ids: torch.Tensor
    positions: torch.Tensor
    attention: AttentionInputs
    logit_rows: torch.Tensor


def kv_bytes_per_token(model: DecoderForCausalLM) -> int:
    config = model.config
    element = torch.empty((), dtype=model.dtype).element_size()
    return 2 * config.num_layers * config.num_kv_heads * config.head_dim * element


class ModelRunner:
    def __init__(self, model: DecoderForCausalLM, platform: Platform, num_slots: int) -> None:
        config = model.config
        self.model = model
        self.platform = platform
        self.device = platform.device()
        self.num_slots = num_slots
        self.attn_backend = ops.attention_backend(
            config.num_heads, config.num_kv_heads, config.head_dim, model.dtype, self.device
        )
        shape = self.attn_backend.kv_buffer_shape(num_slots)
        self.kv_buffers = [torch.zeros(shape, dtype=model.dtype, device=self.device) for _ in range(config.num_layers)]
        logger.info(
            "KV cache: %d slots x %d layers, %.1f MiB",
            num_slots,
            config.num_layers,
            num_slots * kv_bytes_per_token(model) / 2**20,
        )

    @torch.inference_mode()
    def forward(self, step: StepInputs) -> torch.Tensor:
        """Float32 logits `[len(step.logit_rows), vocab]`; the step's K/V are written to the cache."""
        ctx = ForwardContext(self.attn_backend, self.attn_backend.plan(step.attention), self.kv_buffers)
        hidden = self.model(step.input_ids.to(self.device), step.positions.to(self.device), ctx)
        self.kv_buffers = ctx.kv_buffers
        return self.model.compute_logits(hidden[step.logit_rows.to(self.device)])
