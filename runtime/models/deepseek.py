"""DeepSeek V2 and V3 (R1): multi-head latent attention over a latent KV cache, the first
`first_k_dense_replace` layers dense, then experts with always-on shared experts.

The config says the rest: the MLA ranks (`q_lora_rank` optional), yarn rope scaling and its
softmax-scale correction (`mscale_all_dim`), and the routing: V3's `noaux_tc` (grouped sigmoid
with a selection bias, `ops.moe_route_grouped`), V2's `group_limited_greedy`
(`ops.moe_route_group_limited`) or `greedy` softmax top-k; `routed_scaling_factor` in all.

V3 checkpoints also carry the multi-token-prediction layers past `num_hidden_layers`; plain
decoding does not use them, so they are not loaded (as for GLM-4-MoE).
"""

from __future__ import annotations

import torch

from sglang import ops
from sglang.ops.attention import AttentionBackend
from sglang.runtime.models.glm import Glm4MoeForCausalLM


class DeepseekV2ForCausalLM(Glm4MoeForCausalLM):
    def build_attention_backend(self, device: torch.device) -> AttentionBackend:
        mla = self.config.mla
        if mla is None:
            raise ValueError(f"{type(self).__name__} needs a config with MLA ranks (kv_lora_rank)")
        heads, _ = self.attention_heads  # this rank's share under tensor parallelism
        return ops.mla_backend(heads, mla.kv_lora_rank, mla.qk_rope_head_dim, self.dtype, device)


class DeepseekV3ForCausalLM(DeepseekV2ForCausalLM):
    pass
