"""Phi-3: a Llama-shaped decoder whose checkpoint stores q/k/v and gate/up fused, with partial
rotary and long-rope scaling from the config."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from sglang.runtime.models.decoder import DecoderForCausalLM
from sglang.runtime.models.weights import split_fused


class Phi3ForCausalLM(DecoderForCausalLM):
    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        c = self.config
        q_rows, kv_rows = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
        fused = {
            "qkv_proj": (("q_proj", q_rows), ("k_proj", kv_rows), ("v_proj", kv_rows)),
            "gate_up_proj": (("gate_proj", c.intermediate_size), ("up_proj", c.intermediate_size)),
        }
        super().load_weights(split_fused(weights, fused))
