"""A model's architecture facts, read from a Hugging Face `config.json` dictionary.

Reads the raw dictionary rather than a `transformers` config object, so both the v4 layout
(`rope_theta` + `rope_scaling`) and the v5 layout (`rope_parameters`) load the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sglang.ops.rotary import RopeScaling


@dataclass(frozen=True)
class MoEConfig:
    num_experts: int
    top_k: int
    intermediate_size: int
    renormalize: bool
    shared_expert_intermediate_size: int = 0
    """Width of an always-on shared expert (Qwen2-MoE; DeepSeek's `n_shared_experts` together);
    0 means none."""
    shared_expert_gated: bool = True
    """Qwen2-MoE scales the shared expert by `sigmoid(shared_expert_gate(x))`; DeepSeek does not."""
    sparse_step: int = 1
    dense_layers: tuple[int, ...] = ()
    """Layers that use a dense MLP instead of experts (`mlp_only_layers`, `first_k_dense_replace`)."""
    grouped: bool = False
    """DeepSeek-V3-style routing (`ops.moe_route_grouped`): sigmoid scores, `num_groups` expert
    groups of which `topk_groups` are searched, a selection bias, `routed_scaling`."""
    group_limited: bool = False
    """DeepSeek-V2's `group_limited_greedy` (`ops.moe_route_group_limited`): softmax scores,
    searched among the `topk_groups` groups with the best single expert."""
    num_groups: int = 1
    topk_groups: int = 1
    routed_scaling: float = 1.0
    """Routed experts' weights are multiplied by it (`routed_scaling_factor`), in every routing."""
    biased: bool = False
    """The router and every expert projection have biases (gpt-oss)."""
    activation: str | None = None
    """The experts' gated activation where it is not the config's `hidden_act` (gpt-oss's
    clamped SwiGLU, `swigluoai`)."""

    def is_moe_layer(self, layer_id: int) -> bool:
        return layer_id not in self.dense_layers and (layer_id + 1) % self.sparse_step == 0


@dataclass(frozen=True)
class MLAConfig:
    """Multi-head latent attention's ranks and head dims (DeepSeek V2/V3)."""

    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    q_lora_rank: int | None = None
    """Queries are projected through a normalized rank-`q_lora_rank` bottleneck when set."""
    rope_interleaved: bool = True
    """The rotary part rotates adjacent pairs (V2 always; V3 unless `rope_interleave` is false)."""

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim


@dataclass(frozen=True)
class ModelConfig:
    architectures: tuple[str, ...]
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: RopeScaling
    max_position: int
    tie_word_embeddings: bool
    hidden_act: str = "silu"
    attention_bias: bool = False
    sliding_window: int | None = None
    moe: MoEConfig | None = None
    eos_token_ids: tuple[int, ...] = ()
    layer_types: tuple[str, ...] = ()
    """Per-layer `full_attention` / `sliding_attention` where the config lists them."""
    partial_rotary_factor: float = 1.0
    """Rotary covers the first `rotary_dim` dimensions of each head, the rest pass through (Phi-3)."""
    local_rope_theta: float | None = None
    """Rotary base of the sliding-window layers where it differs from the global one (Gemma 3);
    those layers use it unscaled."""
    query_pre_attn_scalar: float | None = None
    """Attention scores are scaled by `query_pre_attn_scalar ** -0.5` when set (Gemma), else by
    `head_dim ** -0.5`."""
    attn_logit_softcap: float | None = None
    final_logit_softcap: float | None = None
    mla: MLAConfig | None = None
    """Set for multi-head latent attention; `head_dim` is then its rotary head dim (as transformers
    sets it), which is what the rotary table covers."""
    attention_sinks: bool = False
    """Every attention head has a learned sink logit each query also attends to (gpt-oss)."""
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def op_features(self) -> frozenset[str]:
        """The model features only some kernels serve (`ops.selection.FEATURE_OPS`)."""
        moe_biased = self.moe is not None and self.moe.biased
        return frozenset({"sinks"} if self.attention_sinks else ()) | frozenset({"expert_bias"} if moe_biased else ())

    @property
    def attention_head_dim(self) -> int:
        """The head dim op selection checks attention kernels against: for MLA the width of the
        cached `[latent | k_pe]` row every head attends over (`MLABackend.head_dim`, and what op
        parity's MLA cases state), else `head_dim`. An MLA model binds no K/V attention."""
        return self.mla.kv_lora_rank + self.mla.qk_rope_head_dim if self.mla else self.head_dim

    @property
    def attention_kv_heads(self) -> int:
        """The KV heads attention kernels see: for MLA 1, the one latent row per token every
        query head attends over (`LatentAttention.num_kv_heads`), whatever the config's
        `num_key_value_heads` says; else `num_kv_heads`."""
        return 1 if self.mla else self.num_kv_heads

    def sliding_window_for(self, layer_id: int) -> int | None:
        if self.sliding_window is None:
            return None
        if self.layer_types and self.layer_types[layer_id] != "sliding_attention":
            return None
        return self.sliding_window

    @property
    def rotary_dim(self) -> int:
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def attention_scale(self) -> float:
        return (self.query_pre_attn_scalar or self.head_dim) ** -0.5

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> ModelConfig:
        rope, local_rope = _rope_sections(raw)
        rope_theta = rope.get("rope_theta", raw.get("rope_theta", 10000.0))
        num_heads = raw["num_attention_heads"]
        eos = raw.get("eos_token_id")
        mla = _mla_config(raw)
        _refuse_unsupported_quantization(raw)
        return cls(
            architectures=tuple(raw.get("architectures") or ()),
            hidden_size=raw["hidden_size"],
            num_layers=raw["num_hidden_layers"],
            num_heads=num_heads,
            num_kv_heads=raw.get("num_key_value_heads") or num_heads,
            head_dim=mla.qk_rope_head_dim if mla else raw.get("head_dim") or raw["hidden_size"] // num_heads,
            intermediate_size=raw["intermediate_size"],
            vocab_size=raw["vocab_size"],
            rms_norm_eps=raw.get("rms_norm_eps", 1e-6),
            rope_theta=float(rope_theta),
            rope_scaling=RopeScaling.from_config(rope, raw.get("max_position_embeddings")),
            max_position=raw.get("max_position_embeddings", 4096),
            tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
            hidden_act=raw.get("hidden_activation") or raw.get("hidden_act") or "silu",
            attention_bias=bool(raw.get("attention_bias", raw.get("qkv_bias", False))),
            sliding_window=_sliding_window(raw),
            moe=_moe_config(raw),
            eos_token_ids=tuple(eos) if isinstance(eos, list) else (() if eos is None else (eos,)),
            layer_types=_layer_types(raw),
            partial_rotary_factor=float(rope.get("partial_rotary_factor", raw.get("partial_rotary_factor", 1.0))),
            local_rope_theta=_local_rope_theta(raw, local_rope),
            query_pre_attn_scalar=raw.get("query_pre_attn_scalar"),
            attn_logit_softcap=raw.get("attn_logit_softcapping"),
            final_logit_softcap=raw.get("final_logit_softcapping"),
            mla=mla,
            attention_sinks=raw.get("model_type") == "gpt_oss",
            raw=raw,
        )


def _mla_config(raw: dict[str, Any]) -> MLAConfig | None:
    if not raw.get("kv_lora_rank"):
        return None
    return MLAConfig(
        kv_lora_rank=raw["kv_lora_rank"],
        qk_nope_head_dim=raw["qk_nope_head_dim"],
        qk_rope_head_dim=raw["qk_rope_head_dim"],
        v_head_dim=raw["v_head_dim"],
        q_lora_rank=raw.get("q_lora_rank"),
        rope_interleaved=raw.get("model_type") == "deepseek_v2" or bool(raw.get("rope_interleave", True)),
    )


_UNSUPPORTED_QUANTIZATION = {
    "mxfp4": "MXFP4 checkpoints (gpt-oss's released weights) are not supported: no kernel family here "
    "serves MXFP4 experts; load a bf16 copy of the weights (with --quantization int8/int4 if wanted) "
    "or a GGUF of them (its MXFP4 experts are dequantized at load)",
}


def _refuse_unsupported_quantization(raw: dict[str, Any]) -> None:
    method = (raw.get("quantization_config") or {}).get("quant_method")
    if method is None:
        return
    reason = _UNSUPPORTED_QUANTIZATION.get(method, f"checkpoints quantized with {method!r} are not supported")
    raise ValueError(reason)


def _rope_sections(raw: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(the global layers' rope parameters, the sliding layers' where the config keys them by
    layer type, as transformers v5 writes Gemma 3's `rope_parameters`)."""
    rope = dict(raw.get("rope_parameters") or raw.get("rope_scaling") or {})
    if "full_attention" in rope:
        return dict(rope["full_attention"]), dict(rope.get("sliding_attention") or {})
    if raw.get("original_max_position_embeddings") is not None:  # Phi-3 keeps it beside the scaling
        rope.setdefault("original_max_position_embeddings", raw["original_max_position_embeddings"])
    return rope, None


def _local_rope_theta(raw: dict[str, Any], local_rope: dict[str, Any] | None) -> float | None:
    if local_rope is not None:
        if local_rope.get("rope_type", "default") != "default":
            raise ValueError(f"rope scaling {local_rope['rope_type']!r} on sliding-window layers is not supported")
        return float(local_rope.get("rope_theta", 10000.0))
    local = raw.get("rope_local_base_freq")  # transformers v4's Gemma 3 layout
    return float(local) if local is not None else None


def _sliding_window(raw: dict[str, Any]) -> int | None:
    """Qwen2-style configs carry a window but only use it with `use_sliding_window`."""
    if raw.get("use_sliding_window") is False:
        return None
    return raw.get("sliding_window")


def _layer_types(raw: dict[str, Any]) -> tuple[str, ...]:
    """The config's `layer_types`, or the ones its window pattern implies: configs written before
    transformers listed them say every `pattern`-th layer is global (Gemma 2 implies 2)."""
    if raw.get("layer_types"):
        return tuple(raw["layer_types"])
    pattern = raw.get("sliding_window_pattern") or (2 if raw.get("model_type") == "gemma2" else None)
    if not pattern:
        return ()
    return tuple(
        "full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(raw["num_hidden_layers"])
    )


def _moe_config(raw: dict[str, Any]) -> MoEConfig | None:
    num_experts = raw.get("num_local_experts") or raw.get("num_experts") or raw.get("n_routed_experts")
    if not num_experts:
        return None
    intermediate = raw.get("moe_intermediate_size") or raw["intermediate_size"]
    if "n_routed_experts" in raw:  # DeepSeek V2/V3 and GLM-4-MoE
        return _deepseek_moe_config(raw, num_experts, intermediate)
    gpt_oss = raw.get("model_type") == "gpt_oss"
    if gpt_oss:
        _check_gpt_oss_swiglu(raw)
    return MoEConfig(
        num_experts=num_experts,
        top_k=raw["num_experts_per_tok"],
        intermediate_size=intermediate,
        biased=gpt_oss,
        activation="swigluoai" if gpt_oss else None,
        # Mixtral always renormalizes the selected weights; Qwen-MoE configs say whether to.
        renormalize=bool(raw.get("norm_topk_prob", True)),
        shared_expert_intermediate_size=raw.get("shared_expert_intermediate_size") or 0,
        sparse_step=raw.get("decoder_sparse_step") or 1,
        dense_layers=tuple(raw.get("mlp_only_layers") or ()),
    )


def _check_gpt_oss_swiglu(raw: dict[str, Any]) -> None:
    """gpt-oss's clamped SwiGLU has fixed constants (`ops.activation.clamped_swiglu_and_mul`)."""
    from sglang.ops.activation import SWIGLU_ALPHA, SWIGLU_LIMIT

    declared = (raw.get("swiglu_alpha", SWIGLU_ALPHA), raw.get("swiglu_limit", SWIGLU_LIMIT))
    if declared != (SWIGLU_ALPHA, SWIGLU_LIMIT):
        raise ValueError(
            f"gpt-oss SwiGLU with alpha={declared[0]}, limit={declared[1]} is not supported "
            f"(supported: alpha={SWIGLU_ALPHA}, limit={SWIGLU_LIMIT})"
        )


_DEEPSEEK_ROUTINGS = ("sigmoid/noaux_tc", "softmax/group_limited_greedy", "softmax/greedy")


def _deepseek_moe_config(raw: dict[str, Any], num_experts: int, intermediate: int) -> MoEConfig:
    """V3 and GLM-4-MoE route by grouped sigmoid with a selection bias (`noaux_tc`); V2 by
    softmax, greedy or group-limited. A config without `scoring_func` implies the one its
    `topk_method` was defined with."""
    topk_method = raw.get("topk_method") or "noaux_tc"
    scoring = raw.get("scoring_func") or ("sigmoid" if topk_method == "noaux_tc" else "softmax")
    routing = f"{scoring}/{topk_method}"
    if routing not in _DEEPSEEK_ROUTINGS:
        raise ValueError(f"MoE routing {routing!r} is not supported (supported: {', '.join(_DEEPSEEK_ROUTINGS)})")
    return MoEConfig(
        num_experts=num_experts,
        top_k=raw["num_experts_per_tok"],
        intermediate_size=intermediate,
        renormalize=bool(raw.get("norm_topk_prob", topk_method == "noaux_tc")),
        shared_expert_intermediate_size=intermediate * (raw.get("n_shared_experts") or 0),
        shared_expert_gated=False,
        dense_layers=tuple(range(raw.get("first_k_dense_replace") or 0)),
        grouped=topk_method == "noaux_tc",
        group_limited=topk_method == "group_limited_greedy",
        num_groups=raw.get("n_group") or 1,
        topk_groups=raw.get("topk_group") or 1,
        routed_scaling=float(raw.get("routed_scaling_factor", 1.0)),
    )
