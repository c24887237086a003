"""The config rules of GGUF's DeepSeek-style MoE families: `deepseek2` (DeepSeek V2 and V3) and
`glm4moe` (GLM-4.5/4.6), as `gguf_families.FAMILY_CONFIGS` entries (same signature).

Both route as DeepSeek does: routed experts (`expert_count`, `expert_used_count`,
`expert_feed_forward_length`), always-on shared experts (`expert_shared_count`), the first
`leading_dense_block_count` layers dense, `expert_weights_scale` (absent: 1, llama.cpp's scale_w
false) and `expert_weights_norm` (written only when true), expert groups
(`expert_group_count` / `expert_group_used_count`, written by convert_hf_to_gguf.py's
`TextModel.set_gguf_parameters` from `n_group` / `topk_group`; files from before those keys give
1 and 1, which is how llama.cpp then routed them).

- DeepSeek V2/V3 (`deepseek2`, convert_hf_to_gguf.py's `DeepseekV2Model`, llama-model.cpp's
  deepseek2 hparams): MLA written as MQA, so the config's KV heads are the query heads and the
  head dims come from `key_length_mla` / `value_length_mla` (older files: `key_length` /
  `value_length`); `kv_lora_rank`, optional `q_lora_rank`. `expert_gating_func` sigmoid (2) is
  V3's `noaux_tc` with the selection bias `exp_probs_b`; softmax (1, or no key, as llama.cpp
  assumes for early V2 files) is V2's, group-limited where `expert_group_count` > 1. Yarn's
  `mscale_all_dim` is `yarn_log_multiplier / 0.1`, and `mscale` equals it (llama-context.cpp's
  assumption, true of every released config). The multi-token-prediction layers are not in the
  file (`skip_mtp`).
- GLM-4-MoE (`glm4moe`, convert_hf_to_gguf.py's `Glm4MoeModel`): always sigmoid `noaux_tc`;
  partial rotary (`rope.dimension_count` of the head); q/k norms where `attn_q_norm` tensors
  exist, biases where `attn_q.bias` does. Its `block_count` includes the
  `nextn_predict_layers` multi-token-prediction layers, which llama.cpp's graph skips
  (`n_layer - nextn_predict_layers` transformer layers); so does this config, and
  `gguf_tensors` drops those layers' tensors.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from .gguf_families import FamilyConfig, clean_float
from .gguf_file import GGUFFile


def _routed_experts(gf: GGUFFile) -> dict[str, Any]:
    """The DeepSeek-style MoE keys both families share (see the module docstring)."""
    return {
        "n_routed_experts": int(gf.require("expert_count")),
        "num_experts_per_tok": int(gf.require("expert_used_count")),
        "moe_intermediate_size": int(gf.require("expert_feed_forward_length")),
        "n_shared_experts": int(gf.arch_value("expert_shared_count", 0)),
        "first_k_dense_replace": int(gf.arch_value("leading_dense_block_count", 0)),
        "routed_scaling_factor": clean_float(gf.arch_value("expert_weights_scale", 1.0)),
        "norm_topk_prob": bool(gf.arch_value("expert_weights_norm", False)),
        "n_group": int(gf.arch_value("expert_group_count", 1)),
        "topk_group": int(gf.arch_value("expert_group_used_count", 1)),
    }


def _mla_dims(gf: GGUFFile, rope_dims: int) -> tuple[int, int]:
    """(qk_nope_head_dim, v_head_dim). Newer converters write MLA as MQA over the latent
    (`key_length` = kv_lora + rope, `value_length` = kv_lora) and the real per-head dims as
    `key_length_mla` / `value_length_mla`; older ones wrote the real dims as `key_length` /
    `value_length` (llama.cpp's loader reads the `*_mla` keys when present, as here)."""
    key = gf.arch_value("attention.key_length_mla") or gf.require("attention.key_length")
    value = gf.arch_value("attention.value_length_mla") or gf.require("attention.value_length")
    return int(key) - rope_dims, int(value)


def mscale_all_dim(log_multiplier: float) -> float:
    """The converter writes `yarn_log_multiplier = 0.1 * mscale_all_dim`; llama.cpp's loader divides
    it back out ([TAG_DEEPSEEK2_YARN_LOG_MUL_FIX] in convert_hf_to_gguf.py and llama-model.cpp).
    Shifting the stored float32's shortest decimal spelling gives the config's value exactly
    (0.0707 -> 0.707), where a float division would give 0.70699996."""
    return float(Decimal(repr(clean_float(log_multiplier))).scaleb(1))


def _deepseek2(gf: GGUFFile, period: int, config: dict[str, Any]) -> dict[str, Any]:
    rope_dims = int(gf.require("rope.dimension_count"))
    nope, value = _mla_dims(gf, rope_dims)
    sigmoid = config["model_type"] == "deepseek_v3"
    experts = _routed_experts(gf)
    softmax_method = "group_limited_greedy" if experts["n_group"] > 1 else "greedy"
    extra: dict[str, Any] = {
        # MLA keeps one latent per token; the Hugging Face config counts query heads (the file's 1 is MQA).
        "num_key_value_heads": config["num_attention_heads"],
        "head_dim": rope_dims,
        "kv_lora_rank": int(gf.require("attention.kv_lora_rank")),
        "q_lora_rank": int(q_rank) if (q_rank := gf.arch_value("attention.q_lora_rank")) else None,
        "qk_rope_head_dim": rope_dims,
        "qk_nope_head_dim": nope,
        "v_head_dim": value,
        **experts,
        "topk_method": "noaux_tc" if sigmoid else softmax_method,
        "scoring_func": "sigmoid" if sigmoid else "softmax",
    }
    scaling = config.get("rope_scaling")
    log_multiplier = gf.arch_value("rope.scaling.yarn_log_multiplier")
    if scaling is not None and scaling["rope_type"] == "yarn" and log_multiplier is not None:
        all_dim = mscale_all_dim(log_multiplier)
        # The file has no `mscale`; llama.cpp (llama-context.cpp) takes it equal to mscale_all_dim,
        # as every released DeepSeek config has it, so yarn's rotary magnitude factor is 1.
        extra["rope_scaling"] = {**scaling, "mscale": all_dim, "mscale_all_dim": all_dim}
    return extra


def _glm4moe(gf: GGUFFile, period: int, config: dict[str, Any]) -> dict[str, Any]:
    head_dim = config["head_dim"]
    return {
        "num_hidden_layers": config["num_hidden_layers"] - int(gf.arch_value("nextn_predict_layers", 0)),
        "partial_rotary_factor": int(gf.arch_value("rope.dimension_count", head_dim)) / head_dim,
        "use_qk_norm": "blk.0.attn_q_norm.weight" in gf.tensors,
        **_routed_experts(gf),
        "topk_method": "noaux_tc",
        "scoring_func": "sigmoid",
    }


DEEPSEEK_FAMILY_CONFIGS: dict[str, FamilyConfig] = {
    "deepseek_v2": _deepseek2,
    "deepseek_v3": _deepseek2,
    "glm4_moe": _glm4moe,
}
