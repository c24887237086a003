"""What each GGUF architecture adds to the config beyond the keys every llama.cpp model has.

`FAMILY_CONFIGS[model_type](gf, default_window_period, config)` returns the Hugging Face config
keys to add or replace, read from the file's `{architecture}.*` keys and, where the file does not
record them, the constants llama.cpp's loader (`llama-model.cpp`, `load_hparams`) assumes. The
rules and where they come from:

- gpt-oss: see `gguf_config`'s module docstring.
- Mixtral (llama.cpp's `llama` with `expert_count`): experts and their width
  (`expert_feed_forward_length`, else `feed_forward_length`), the optional window.
- Phi-3 (`phi3`): `rope.dimension_count` rotary dims of a `hidden / heads` head (partial rotary);
  long-rope factors are the tensors `rope_factors_long/short.weight` and its attention factor
  `rope.scaling.attn_factor` (convert_hf_to_gguf.py's `Phi3MiniModel.generate_extra_tensors`);
  the original context is `rope.scaling.original_context_length`. The converter writes
  `sliding_window` 0 for none; a positive one is kept, as the original config.json had it and
  transformers applies it (llama.cpp's loader ignores Phi windows, llama.cpp PR 13676).
- Gemma 2 (`gemma2`): soft-caps `attn_logit_softcapping` / `final_logit_softcapping` (llama.cpp's
  defaults 50 and 30 when absent), window `attention.sliding_window` (default 4096) on every
  other layer (period 2), GELU-tanh. The converter drops `query_pre_attn_scalar`; llama.cpp
  derives the attention scale from the model size: `n_embd / n_head` for the 27B (46 layers),
  the head dim otherwise, which is what each released config.json says.
- Gemma 3 (`gemma3`): window period 6 and a rotary base of 10000 on windowed layers, both
  hard-coded in llama.cpp (`rope_freq_base_train_swa`, and no scaling there: the file's
  `rope.scaling.*` applies to global layers only); the file's `rope.freq_base` is the global
  layers'. No window key (or 0): no windowed layers. Final soft-cap only if stored. Attention
  scale as Gemma 2, with the 27B at 62 layers.
- DeepSeek V2/V3 (`deepseek2`, convert_hf_to_gguf.py's `DeepseekV2Model`, llama-model.cpp's
  deepseek2 hparams): MLA written as MQA, so the config's KV heads are the query heads and the
  head dims come from `key_length_mla` / `value_length_mla` (older files: `key_length` /
  `value_length`); `kv_lora_rank`, optional `q_lora_rank`; experts, shared experts
  (`expert_shared_count`), leading dense blocks, `expert_weights_scale` (absent: 1) and
  `expert_weights_norm` (written only when true). `expert_gating_func` sigmoid (2) is V3's
  `noaux_tc` with the selection bias `exp_probs_b`; softmax (1, or no key, as llama.cpp assumes
  for early V2 files) is V2's, group-limited where `expert_group_count` > 1 (files before
  the group keys route greedily, as llama.cpp then did). Yarn's `mscale_all_dim` is
  `yarn_log_multiplier / 0.1`, and `mscale` equals it (llama-context.cpp's assumption, true of
  every released config). The multi-token-prediction layers are not in the file (`skip_mtp`).

The Gemma converters also store every `*norm.weight` plus one (`ArchitectureInfo.norm_offset`):
that is undone on the tensors, not here.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

import numpy as np

from .errors import UnsupportedModelError
from .gguf_file import GGUFFile

FamilyConfig = Callable[[GGUFFile, int, dict[str, Any]], dict[str, Any]]

_LLAMA_CPP_DEFAULT_ROPE_BASE = 10000.0
"""llama.cpp's rotary base when a file has none, and Gemma 3's hard-coded one on windowed layers."""


def clean_float(value: float) -> float:
    """A float32 metadata value as its shortest decimal spelling (the value config.json held)."""
    return float(str(np.float32(value)))


def window_layer_types(gf: GGUFFile, layers: int, default_period: int) -> list[str]:
    """llama.cpp's `set_swa_pattern(period)` (a period of 0: every layer slides), or a per-layer list."""
    pattern = gf.arch_value("attention.sliding_window_pattern", default_period)
    if isinstance(pattern, list):
        if len(pattern) != layers:
            raise UnsupportedModelError(
                f"{gf.path.name}: sliding_window_pattern lists {len(pattern)} of {layers} layers"
            )
        sliding = [bool(p) for p in pattern]
    else:
        period = int(pattern)
        sliding = [period == 0 or i % period < period - 1 for i in range(layers)]
    return ["sliding_attention" if s else "full_attention" for s in sliding]


def _experts(gf: GGUFFile, config: dict[str, Any]) -> dict[str, Any]:
    return {
        "num_local_experts": int(gf.require("expert_count")),
        "num_experts_per_tok": int(gf.require("expert_used_count")),
        "intermediate_size": int(gf.arch_value("expert_feed_forward_length", config["intermediate_size"])),
    }


def _gpt_oss(gf: GGUFFile, period: int, config: dict[str, Any]) -> dict[str, Any]:
    extra: dict[str, Any] = {
        **_experts(gf, config),
        "sliding_window": int(gf.require("attention.sliding_window")),
        "layer_types": window_layer_types(gf, config["num_hidden_layers"], period),
        "swiglu_limit": 7.0,
    }
    scaling = config.get("rope_scaling")
    if scaling is not None and scaling["rope_type"] == "yarn":
        extra["rope_scaling"] = {**scaling, "truncate": False}
    return extra


def _mixtral(gf: GGUFFile, period: int, config: dict[str, Any]) -> dict[str, Any]:
    extra = _experts(gf, config)
    window = gf.arch_value("attention.sliding_window")
    if window:
        extra["sliding_window"] = int(window)
    return extra


def _rope_factors(gf: GGUFFile, name: str) -> list[float]:
    return [clean_float(v) for v in np.asarray(gf.tensors[name].data, dtype=np.float32).reshape(-1)]


def _phi3(gf: GGUFFile, period: int, config: dict[str, Any]) -> dict[str, Any]:
    head_dim = config["head_dim"]
    extra: dict[str, Any] = {
        "partial_rotary_factor": int(gf.arch_value("rope.dimension_count", head_dim)) / head_dim,
    }
    original = gf.arch_value("rope.scaling.original_context_length")
    if original is not None:
        extra["original_max_position_embeddings"] = int(original)
    if gf.arch_value("attention.sliding_window"):
        extra["sliding_window"] = int(gf.arch_value("attention.sliding_window"))
    if "rope_factors_long.weight" in gf.tensors:
        scaling: dict[str, Any] = {
            "rope_type": "longrope",
            "long_factor": _rope_factors(gf, "rope_factors_long.weight"),
            "short_factor": _rope_factors(gf, "rope_factors_short.weight"),
        }
        if original is not None:
            scaling["original_max_position_embeddings"] = int(original)
        attn_factor = gf.arch_value("rope.scaling.attn_factor")
        if attn_factor is not None:
            scaling["attention_factor"] = clean_float(attn_factor)
        extra["rope_scaling"] = scaling
    return extra


def _gemma_scalar(config: dict[str, Any], layers_of_27b: int) -> float:
    """llama.cpp's `f_attention_scale` as the query scalar it is the inverse square root of."""
    if config["num_hidden_layers"] == layers_of_27b:
        return config["hidden_size"] // config["num_attention_heads"]
    return config["head_dim"]


def _gemma2(gf: GGUFFile, period: int, config: dict[str, Any]) -> dict[str, Any]:
    return {
        "hidden_act": "gelu_pytorch_tanh",
        "hidden_activation": "gelu_pytorch_tanh",
        "query_pre_attn_scalar": _gemma_scalar(config, layers_of_27b=46),
        "attn_logit_softcapping": clean_float(gf.arch_value("attn_logit_softcapping", 50.0)),
        "final_logit_softcapping": clean_float(gf.arch_value("final_logit_softcapping", 30.0)),
        "sliding_window": int(gf.arch_value("attention.sliding_window", 4096)),
        "layer_types": window_layer_types(gf, config["num_hidden_layers"], period),
    }


def _gemma3(gf: GGUFFile, period: int, config: dict[str, Any]) -> dict[str, Any]:
    window = int(gf.arch_value("attention.sliding_window", 0))
    final_cap = gf.arch_value("final_logit_softcapping")
    extra: dict[str, Any] = {
        "hidden_act": "gelu_pytorch_tanh",
        "hidden_activation": "gelu_pytorch_tanh",
        "query_pre_attn_scalar": _gemma_scalar(config, layers_of_27b=62),
        "final_logit_softcapping": clean_float(final_cap) if final_cap else None,
        "attn_logit_softcapping": None,
    }
    if window > 0:
        extra |= {
            "sliding_window": window,
            "layer_types": window_layer_types(gf, config["num_hidden_layers"], period),
            "rope_local_base_freq": _LLAMA_CPP_DEFAULT_ROPE_BASE,
        }
    return extra


def _mscale_all_dim(log_multiplier: float) -> float:
    """The converter writes `yarn_log_multiplier = 0.1 * mscale_all_dim`; llama.cpp's loader divides
    it back out ([TAG_DEEPSEEK2_YARN_LOG_MUL_FIX] in convert_hf_to_gguf.py and llama-model.cpp).
    Shifting the stored float32's shortest decimal spelling gives the config's value exactly
    (0.0707 -> 0.707), where a float division would give 0.70699996."""
    return float(Decimal(repr(clean_float(log_multiplier))).scaleb(1))


def _mla_dims(gf: GGUFFile, rope_dims: int) -> tuple[int, int]:
    """(qk_nope_head_dim, v_head_dim). Newer converters write MLA as MQA over the latent
    (`key_length` = kv_lora + rope, `value_length` = kv_lora) and the real per-head dims as
    `key_length_mla` / `value_length_mla`; older ones wrote the real dims as `key_length` /
    `value_length` (llama.cpp's loader reads the `*_mla` keys when present, as here)."""
    key = gf.arch_value("attention.key_length_mla") or gf.require("attention.key_length")
    value = gf.arch_value("attention.value_length_mla") or gf.require("attention.value_length")
    return int(key) - rope_dims, int(value)


def _deepseek2(gf: GGUFFile, period: int, config: dict[str, Any]) -> dict[str, Any]:
    rope_dims = int(gf.require("rope.dimension_count"))
    nope, value = _mla_dims(gf, rope_dims)
    sigmoid = config["model_type"] == "deepseek_v3"
    groups = int(gf.arch_value("expert_group_count", 1))
    # V2's softmax routing is group-limited only where the file records groups (newer converters).
    softmax_method = "group_limited_greedy" if groups > 1 else "greedy"
    extra: dict[str, Any] = {
        # MLA keeps one latent per token; the Hugging Face config counts query heads (the file's 1 is MQA).
        "num_key_value_heads": config["num_attention_heads"],
        "head_dim": rope_dims,
        "kv_lora_rank": int(gf.require("attention.kv_lora_rank")),
        "q_lora_rank": int(q_rank) if (q_rank := gf.arch_value("attention.q_lora_rank")) else None,
        "qk_rope_head_dim": rope_dims,
        "qk_nope_head_dim": nope,
        "v_head_dim": value,
        "n_routed_experts": int(gf.require("expert_count")),
        "num_experts_per_tok": int(gf.require("expert_used_count")),
        "moe_intermediate_size": int(gf.require("expert_feed_forward_length")),
        "n_shared_experts": int(gf.arch_value("expert_shared_count", 0)),
        "first_k_dense_replace": int(gf.arch_value("leading_dense_block_count", 0)),
        # Both written only when set: no scale means 1 (llama.cpp's scale_w false), no norm false.
        "routed_scaling_factor": clean_float(gf.arch_value("expert_weights_scale", 1.0)),
        "norm_topk_prob": bool(gf.arch_value("expert_weights_norm", False)),
        "n_group": groups,
        "topk_group": int(gf.arch_value("expert_group_used_count", 1)),
        "topk_method": "noaux_tc" if sigmoid else softmax_method,
        "scoring_func": "sigmoid" if sigmoid else "softmax",
    }
    scaling = config.get("rope_scaling")
    log_multiplier = gf.arch_value("rope.scaling.yarn_log_multiplier")
    if scaling is not None and scaling["rope_type"] == "yarn" and log_multiplier is not None:
        mscale_all_dim = _mscale_all_dim(log_multiplier)
        # The file has no `mscale`; llama.cpp (llama-context.cpp) takes it equal to mscale_all_dim,
        # as every released DeepSeek config has it, so yarn's rotary magnitude factor is 1.
        extra["rope_scaling"] = {**scaling, "mscale": mscale_all_dim, "mscale_all_dim": mscale_all_dim}
    return extra


FAMILY_CONFIGS: dict[str, FamilyConfig] = {
    "gpt_oss": _gpt_oss,
    "mixtral": _mixtral,
    "phi3": _phi3,
    "gemma2": _gemma2,
    "gemma3_text": _gemma3,
    "deepseek_v2": _deepseek2,
    "deepseek_v3": _deepseek2,
}
