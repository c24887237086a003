"""DeepSeek V2/V3 (`deepseek2`) and GLM-4-MoE (`glm4moe`) as llama.cpp's converter writes them,
for `gguf_family_synth` (see its docstring for what each writes)."""

from __future__ import annotations

import gguf
import torch
from transformers import PreTrainedConfig

DEEPSEEK_NAMES = {
    "post_attention_layernorm": "ffn_norm",
    "self_attn.q_a_proj": "attn_q_a",
    "self_attn.q_a_layernorm": "attn_q_a_norm",
    "self_attn.q_b_proj": "attn_q_b",
    "self_attn.kv_a_proj_with_mqa": "attn_kv_a_mqa",
    "self_attn.kv_a_layernorm": "attn_kv_a_norm",
    "self_attn.kv_b_proj": "attn_kv_b",
    "mlp.gate": "ffn_gate_inp",
    "mlp.shared_experts.gate_proj": "ffn_gate_shexp",
    "mlp.shared_experts.up_proj": "ffn_up_shexp",
    "mlp.shared_experts.down_proj": "ffn_down_shexp",
}
"""Hugging Face module -> gguf-py name (tensor_mapping.py) beyond the common ones."""
GLM4MOE_NAMES = {**DEEPSEEK_NAMES, "post_attention_layernorm": "post_attention_norm"}
"""gguf-py maps GLM4_MOE's post_attention_layernorm to ATTN_POST_NORM."""


def split_kv_b(kv_b: torch.Tensor, config: PreTrainedConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """`DeepseekV2Model.modify_tensors`: per head, the nope rows (transposed) and the v rows."""
    heads, nope, value = config.num_attention_heads, config.qk_nope_head_dim, config.v_head_dim
    k_b, v_b = kv_b.view(heads, nope + value, kv_b.shape[-1]).split([nope, value], dim=1)
    return k_b.transpose(1, 2), v_b


def mtp_layer(tensors: dict[str, torch.Tensor], config: PreTrainedConfig) -> dict[str, torch.Tensor]:
    """GLM-4-MoE's multi-token-prediction layer as the converter writes it, after the last layer."""
    last, mtp, hidden = config.num_hidden_layers - 1, config.num_hidden_layers, config.hidden_size
    layer = {
        name.replace(f"blk.{last}.", f"blk.{mtp}."): t for name, t in tensors.items() if name.startswith(f"blk.{last}.")
    }
    generator = torch.Generator().manual_seed(1)
    nextn = {"eh_proj": (hidden, 2 * hidden), "enorm": (hidden,), "hnorm": (hidden,), "shared_head_norm": (hidden,)}
    return layer | {
        f"blk.{mtp}.nextn.{n}.weight": torch.randn(shape, generator=generator) for n, shape in nextn.items()
    }


def write_deepseek_keys(w: gguf.GGUFWriter, c: PreTrainedConfig, legacy_mla: bool) -> None:
    rope = c.rope_parameters
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(rope["factor"])
    w.add_rope_scaling_orig_ctx_len(rope["original_max_position_embeddings"])
    w.add_rope_scaling_yarn_beta_fast(rope["beta_fast"])
    w.add_rope_scaling_yarn_beta_slow(rope["beta_slow"])
    w.add_rope_freq_base(rope["rope_theta"])
    w.add_expert_count(c.n_routed_experts)
    w.add_expert_used_count(c.num_experts_per_tok)
    if not legacy_mla:
        w.add_expert_group_count(c.n_group)
        w.add_expert_group_used_count(c.topk_group)
        v3 = c.model_type == "deepseek_v3"
        w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID if v3 else gguf.ExpertGatingFuncType.SOFTMAX)
    w.add_leading_dense_block_count(c.first_k_dense_replace)
    w.add_vocab_size(c.vocab_size)
    if c.q_lora_rank is not None:
        w.add_q_lora_rank(c.q_lora_rank)
    w.add_kv_lora_rank(c.kv_lora_rank)
    if legacy_mla:
        w.add_key_length(c.qk_nope_head_dim + c.qk_rope_head_dim)
        w.add_value_length(c.v_head_dim)
    else:
        w.add_key_length(c.kv_lora_rank + c.qk_rope_head_dim)
        w.add_value_length(c.kv_lora_rank)
        w.add_key_length_mla(c.qk_nope_head_dim + c.qk_rope_head_dim)
        w.add_value_length_mla(c.v_head_dim)
    w.add_expert_feed_forward_length(c.moe_intermediate_size)
    w.add_expert_shared_count(c.n_shared_experts)
    w.add_expert_weights_scale(c.routed_scaling_factor)
    if c.norm_topk_prob:
        w.add_expert_weights_norm(True)
    w.add_rope_dimension_count(c.qk_rope_head_dim)
    w.add_rope_scaling_yarn_log_mul(0.1 * rope["mscale_all_dim"])


def write_glm4moe_keys(w: gguf.GGUFWriter, c: PreTrainedConfig) -> None:
    rope = c.rope_parameters
    w.add_rope_freq_base(rope["rope_theta"])
    w.add_rope_dimension_count(int(c.hidden_size // c.num_attention_heads * rope["partial_rotary_factor"]))
    w.add_expert_count(c.n_routed_experts)
    w.add_expert_used_count(c.num_experts_per_tok)
    w.add_expert_group_count(c.n_group)
    w.add_expert_group_used_count(c.topk_group)
    w.add_expert_feed_forward_length(c.moe_intermediate_size)
    w.add_expert_shared_count(c.n_shared_experts)
    w.add_leading_dense_block_count(c.first_k_dense_replace)
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    w.add_expert_weights_scale(c.routed_scaling_factor)
    w.add_expert_weights_norm(c.norm_topk_prob)
    w.add_nextn_predict_layers(c.num_nextn_predict_layers)
