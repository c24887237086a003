"""What each GGUF architecture adds to the config beyond the keys every llama.cpp model has.

`FAMILY_CONFIGS[model_type](gf, default_window_period, config)` returns the Hugging Face config
keys to add or replace, read from the file's `{architecture}.*` keys and, where the file does not
record them, the constants llama.cpp's loader (`llama-model.cpp`, `load_hparams`) assumes. The
rules and where they come from:

- gpt-oss: see `gguf_config`'s module docstring.
- DeepSeek V2/V3 and GLM-4-MoE: see `gguf_deepseek_families`.
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

The Gemma converters also store every `*norm.weight` plus one (`ArchitectureInfo.norm_offset`):
that is undone on the tensors, not here.
"""

from __future__ import annotations

from collections.abc import Callable
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


FAMILY_CONFIGS: dict[str, FamilyConfig] = {
    "gpt_oss": _gpt_oss,
    "mixtral": _mixtral,
    "phi3": _phi3,
    "gemma2": _gemma2,
    "gemma3_text": _gemma3,
}
