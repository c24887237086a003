"""GLM-4-MoE (GLM-4.5): a DeepSeek-V3-style mixture of experts (grouped sigmoid routing with a
selection bias, shared experts, the first layers dense) over GQA attention with QKV biases,
partial rotary and, where the config says so, per-head q/k norm.

Checkpoints also carry the multi-token-prediction layers past `num_hidden_layers`
(`num_nextn_predict_layers`); plain decoding does not use them, so they are not loaded.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable

import torch

from sglang.runtime.models.config import ModelConfig
from sglang.runtime.models.decoder import DecoderForCausalLM
from sglang.runtime.models.traits import DecoderTraits

_LAYER = re.compile(r"^model\.layers\.(\d+)\.")


class Glm4MoeForCausalLM(DecoderForCausalLM):
    checkpoint_renames = {".mlp.shared_experts.": ".mlp.shared_expert."}

    @classmethod
    def decoder_traits(cls, config: ModelConfig) -> DecoderTraits:
        return dataclasses.replace(cls.traits, qk_norm=bool(config.raw.get("use_qk_norm", False)))

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        layers = self.config.num_layers
        super().load_weights(
            (name, tensor) for name, tensor in weights if not ((m := _LAYER.match(name)) and int(m[1]) >= layers)
        )
