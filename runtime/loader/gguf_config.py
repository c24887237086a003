"""A Hugging Face config dict from GGUF metadata.

llama.cpp stores hyperparameters under `{architecture}.*` keys; this maps them onto the keys a
Hugging Face config.json of the same model has, so the rest of the runtime sees one config format
whatever the checkpoint. Supported GGUF architectures are those in `ARCHITECTURES` (llama.cpp
converts Mistral 7B-style models to `llama`, so they load as LlamaForCausalLM, and Mixtral to
`llama` with `expert_count`, loaded as MixtralForCausalLM, and DeepSeek V2 and V3 both to
`deepseek2`, told apart by the gating function, and GLM-4.5/4.6 to `glm4moe`); anything else fails with
UnsupportedModelError naming the architecture. What each family adds (experts, windows, soft-caps,
long-rope factors, the constants llama.cpp assumes) is in `gguf_families`.

gpt-oss (`gpt-oss`, llama.cpp's LLM_ARCH_OPENAI_MOE) adds what its GGUF keys say: experts
(`expert_count`, `expert_used_count`, `expert_feed_forward_length`), the window
(`attention.sliding_window`) and which layers use it (`attention.sliding_window_pattern`, a
period where layer `i` slides iff `i % period < period - 1`, or a per-layer list; llama.cpp
defaults the period to 2, so even layers slide, as transformers' gpt-oss does), and yarn's betas.
What the file does not record are gpt-oss's constants: the clamped SwiGLU's alpha 1.702 and limit
7.0 (hard-coded in llama.cpp's `LLM_FFN_SWIGLU_OAI_MOE` as in transformers), and yarn without
truncated correction ranges (`truncate: false` in gpt-oss's config.json; llama.cpp's ggml rope
truncates, so it differs from transformers there, and we follow transformers).

Values the file stores as float32 (rope theta, rms eps) are rounded to their shortest decimal
spelling (1e-05, not 9.999999747378752e-06), which is the value the original config.json held.
The dict has no `torch_dtype` for quantized files (their original dtype is not recorded), so dtype
"auto" then picks the platform default.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import UnsupportedModelError
from .gguf_deepseek_families import DEEPSEEK_FAMILY_CONFIGS
from .gguf_families import FAMILY_CONFIGS, clean_float
from .gguf_file import GGUFFile


@dataclass(frozen=True)
class ArchitectureInfo:
    hf_class: str
    model_type: str
    permuted_qk: bool
    """llama.cpp's converter permuted Q/K rows for its rotary layout (see gguf_tensors.unpermute_qk)."""
    qkv_bias: bool | None
    """Whether attention projections have biases; None: decided by the tensors present."""
    block_names: Mapping[str, str] = field(default_factory=dict)
    """GGUF block tensor names whose Hugging Face name differs from `gguf_tensors`' default map."""
    window_period: int | None = None
    """llama.cpp's default sliding-window period when the file has a window but no pattern."""
    norm_offset: float = 0.0
    """llama.cpp's converter stored every `*norm.weight` as `w + norm_offset` (Gemma's `1 + w` norms)."""
    config_tensors: frozenset[str] = frozenset()
    """Tensors that hold config values (Phi-3's long-rope factors), read into the config, not weights."""


_GEMMA_NORMS = {
    "post_attention_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
}
"""gguf-py's names for Gemma 2/3's four norms around attention and MLP (tensor_mapping.py)."""

_DEEPSEEK_NAMES = {
    "attn_q_a": "self_attn.q_a_proj",
    "attn_q_a_norm": "self_attn.q_a_layernorm",
    "attn_q_b": "self_attn.q_b_proj",
    "attn_kv_a_mqa": "self_attn.kv_a_proj_with_mqa",
    "attn_kv_a_norm": "self_attn.kv_a_layernorm",
    "attn_kv_b": "self_attn.kv_b_proj",
    "ffn_gate_inp": "mlp.gate",
    "exp_probs_b": "mlp.gate.e_score_correction_bias",
    "ffn_gate_shexp": "mlp.shared_experts.gate_proj",
    "ffn_up_shexp": "mlp.shared_experts.up_proj",
    "ffn_down_shexp": "mlp.shared_experts.down_proj",
}
"""gguf-py's DeepSeek 2 names (tensor_mapping.py), the MoE ones shared by GLM-4-MoE. Newer
converters store `kv_b_proj` split into `attn_k_b` and `attn_v_b`; `gguf_tensors` joins them back."""

ARCHITECTURES: dict[str, ArchitectureInfo] = {
    "llama": ArchitectureInfo("LlamaForCausalLM", "llama", permuted_qk=True, qkv_bias=None),
    "qwen2": ArchitectureInfo("Qwen2ForCausalLM", "qwen2", permuted_qk=False, qkv_bias=True),
    "qwen3": ArchitectureInfo("Qwen3ForCausalLM", "qwen3", permuted_qk=False, qkv_bias=False),
    "gpt-oss": ArchitectureInfo(
        "GptOssForCausalLM",
        "gpt_oss",
        permuted_qk=False,  # NEOX rotary: llama.cpp keeps Hugging Face's row order
        qkv_bias=True,
        block_names={
            "attn_sinks": "self_attn.sinks",
            "post_attention_norm": "post_attention_layernorm",
            "ffn_gate_inp": "mlp.router",
        },
        window_period=2,
    ),
    "phi3": ArchitectureInfo(
        "Phi3ForCausalLM",
        "phi3",
        permuted_qk=False,  # NEOX rotary (llama_model_rope_type)
        qkv_bias=False,
        # Fused as in Hugging Face's checkpoint; `ffn_up` holds gate rows then up rows.
        block_names={"attn_qkv": "self_attn.qkv_proj", "ffn_up": "mlp.gate_up_proj"},
        config_tensors=frozenset({"rope_factors_long.weight", "rope_factors_short.weight"}),
    ),
    "gemma2": ArchitectureInfo(
        "Gemma2ForCausalLM",
        "gemma2",
        permuted_qk=False,
        qkv_bias=False,
        block_names=_GEMMA_NORMS,
        window_period=2,
        norm_offset=1.0,
    ),
    "gemma3": ArchitectureInfo(
        "Gemma3ForCausalLM",
        "gemma3_text",
        permuted_qk=False,
        qkv_bias=False,
        block_names=_GEMMA_NORMS,
        window_period=6,
        norm_offset=1.0,
    ),
    "deepseek2": ArchitectureInfo(
        "DeepseekV2ForCausalLM",
        "deepseek_v2",
        permuted_qk=False,  # llama.cpp's DeepseekV2Model writes Hugging Face's rows unpermuted
        qkv_bias=False,
        block_names=_DEEPSEEK_NAMES,
    ),
    "glm4moe": ArchitectureInfo(
        "Glm4MoeForCausalLM",
        "glm4_moe",
        permuted_qk=False,  # NEOX rotary: Glm4MoeModel keeps Hugging Face's row order
        qkv_bias=None,
        # gguf-py maps GLM4_MOE's post_attention_layernorm to ATTN_POST_NORM, not FFN_NORM.
        block_names={**_DEEPSEEK_NAMES, "post_attention_norm": "post_attention_layernorm"},
    ),
}

DEEPSEEK_V3 = dataclasses.replace(
    ARCHITECTURES["deepseek2"], hf_class="DeepseekV3ForCausalLM", model_type="deepseek_v3"
)
"""llama.cpp writes V2 and V3 alike as `deepseek2`; V3 routes by sigmoid (`expert_gating_func` 2)."""

_SIGMOID_GATING = 2
"""gguf-py's ExpertGatingFuncType.SIGMOID (SOFTMAX is 1; a file without the key means softmax)."""

MIXTRAL = ArchitectureInfo(
    "MixtralForCausalLM", "mixtral", permuted_qk=True, qkv_bias=None, block_names={"ffn_gate_inp": "mlp.gate"}
)
"""llama.cpp writes Mixtral as `llama` with `expert_count` (convert_hf_to_gguf.py's LlamaModel)."""

# Optional yarn parameters convert_hf_to_gguf.py writes when the config has them, by GGUF key.
_YARN_KEYS = {
    "yarn_beta_fast": "beta_fast",
    "yarn_beta_slow": "beta_slow",
    "yarn_attn_factor": "attention_factor",
}

# general.file_type (llama_ftype) values whose weights are unquantized, and the dtype they are in.
_UNQUANTIZED_FILE_TYPES = {0: "float32", 1: "float16", 32: "bfloat16"}


def architecture_info(gf: GGUFFile) -> ArchitectureInfo:
    arch = gf.architecture
    if arch not in ARCHITECTURES:
        raise UnsupportedModelError(
            f"{gf.path.name}: GGUF architecture {arch!r} is not supported (supported: {', '.join(ARCHITECTURES)})"
        )
    if arch == "llama" and gf.arch_value("expert_count"):
        return MIXTRAL
    if arch == "deepseek2" and gf.arch_value("expert_gating_func") == _SIGMOID_GATING:
        return DEEPSEEK_V3
    return ARCHITECTURES[arch]


def gguf_to_hf_config(gf: GGUFFile) -> dict[str, Any]:
    """The config.json dict of the model in `gf` (see the module docstring)."""
    info = architecture_info(gf)
    heads = int(gf.require("attention.head_count"))
    kv_heads = gf.arch_value("attention.head_count_kv", heads)
    if not isinstance(kv_heads, int):
        raise UnsupportedModelError(f"{gf.path.name}: per-layer KV head counts are not supported")
    hidden = int(gf.require("embedding_length"))
    embed = gf.tensors.get("token_embd.weight")
    if embed is None:
        raise UnsupportedModelError(f"{gf.path.name} has no token_embd.weight tensor")
    qkv_bias = info.qkv_bias if info.qkv_bias is not None else "blk.0.attn_q.bias" in gf.tensors
    config: dict[str, Any] = {
        "architectures": [info.hf_class],
        "model_type": info.model_type,
        "hidden_size": hidden,
        "num_hidden_layers": int(gf.require("block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": int(gf.arch_value("attention.key_length", hidden // heads)),
        "intermediate_size": int(gf.require("feed_forward_length")),
        # The embedding's row count is what the weights have; the vocab_size key is optional in GGUF.
        "vocab_size": int(embed.shape[-1]),
        "max_position_embeddings": int(gf.require("context_length")),
        "rope_theta": clean_float(gf.arch_value("rope.freq_base", 10000.0)),
        "rms_norm_eps": clean_float(gf.require("attention.layer_norm_rms_epsilon")),
        "hidden_act": "silu",
        "tie_word_embeddings": "output.weight" not in gf.tensors,
        "attention_bias": qkv_bias,
        "mlp_bias": False,
    }
    for key in ("bos_token_id", "eos_token_id", "padding_token_id"):
        value = gf.metadata.get(f"tokenizer.ggml.{key}")
        if value is not None:
            config[key.replace("padding", "pad")] = int(value)
    rope_scaling = _rope_scaling(gf)
    if rope_scaling is not None:
        config["rope_scaling"] = rope_scaling
    dtype = _UNQUANTIZED_FILE_TYPES.get(gf.metadata.get("general.file_type", -1))
    if dtype is not None:
        config["torch_dtype"] = dtype
    family = (FAMILY_CONFIGS | DEEPSEEK_FAMILY_CONFIGS).get(info.model_type)
    if family is not None:
        config.update(family(gf, info.window_period or 0, config))
    return config


def _rope_scaling(gf: GGUFFile) -> dict[str, Any] | None:
    kind = gf.arch_value("rope.scaling.type")
    if "rope_freqs.weight" in gf.tensors:
        # Llama 3.1-style frequency scaling is stored as a tensor whose parameters are not recoverable.
        raise UnsupportedModelError(
            f"{gf.path.name}: rope frequency tensors (rope_freqs, Llama 3.1 scaling) are not supported"
        )
    if kind in (None, "none"):
        return None
    if kind not in ("linear", "yarn"):
        raise UnsupportedModelError(f"{gf.path.name}: rope scaling {kind!r} is not supported")
    scaling: dict[str, Any] = {"rope_type": kind, "factor": clean_float(gf.require("rope.scaling.factor"))}
    original = gf.arch_value("rope.scaling.original_context_length")
    if original is not None:
        scaling["original_max_position_embeddings"] = int(original)
    for key, hf_key in _YARN_KEYS.items():
        value = gf.arch_value(f"rope.scaling.{key}")
        if value is not None:
            scaling[hf_key] = clean_float(value)
    return scaling
