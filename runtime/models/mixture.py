"""Mixture-of-experts architectures: Mixtral, Qwen2-MoE (shared expert), Qwen3-MoE (q/k norm).

The experts block is chosen by the config (`num_local_experts` / `num_experts`); these classes
declare only what the config does not say.
"""

from sglang.runtime.models.decoder import DecoderForCausalLM
from sglang.runtime.models.traits import DecoderTraits


class MixtralForCausalLM(DecoderForCausalLM):
    checkpoint_renames = {".block_sparse_moe.": ".mlp."}


class Qwen2MoeForCausalLM(DecoderForCausalLM):
    default_qkv_bias = True


class Qwen3MoeForCausalLM(DecoderForCausalLM):
    traits = DecoderTraits(qk_norm=True)
