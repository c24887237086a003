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
    """Width of an always-on shared expert (Qwen2-MoE); 0 means none."""
    sparse_step: int = 1
    dense_layers: tuple[int, ...] = ()
    """Layers that use a dense MLP instead of experts (`mlp_only_layers`)."""

    def is_moe_layer(self, layer_id: int) -> bool:
        return layer_id not in self.dense_layers and (layer_id + 1) % self.sparse_step == 0


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
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def sliding_window_for(self, layer_id: int) -> int | None:
        if self.sliding_window is None:
            return None
        if self.layer_types and self.layer_types[layer_id] != "sliding_attention":
            return None
        return self.sliding_window

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> ModelConfig:
        rope = dict(raw.get("rope_parameters") or raw.get("rope_scaling") or {})
        rope_theta = rope.get("rope_theta", raw.get("rope_theta", 10000.0))
        num_heads = raw["num_attention_heads"]
        eos = raw.get("eos_token_id")
        return cls(
            architectures=tuple(raw.get("architectures") or ()),
            hidden_size=raw["hidden_size"],
            num_layers=raw["num_hidden_layers"],
            num_heads=num_heads,
            num_kv_heads=raw.get("num_key_value_heads") or num_heads,
            head_dim=raw.get("head_dim") or raw["hidden_size"] // num_heads,
            intermediate_size=raw["intermediate_size"],
            vocab_size=raw["vocab_size"],
            rms_norm_eps=raw.get("rms_norm_eps", 1e-6),
            rope_theta=float(rope_theta),
            rope_scaling=RopeScaling.from_config(rope),
            max_position=raw.get("max_position_embeddings", 4096),
            tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
            hidden_act=raw.get("hidden_act", "silu"),
            attention_bias=bool(raw.get("attention_bias", raw.get("qkv_bias", False))),
            sliding_window=_sliding_window(raw),
            moe=_moe_config(raw),
            eos_token_ids=tuple(eos) if isinstance(eos, list) else (() if eos is None else (eos,)),
            layer_types=_layer_types(raw),
            raw=raw,
        )


def _sliding_window(raw: dict[str, Any]) -> int | None:
    """Qwen2-style configs carry a window but only use it with `use_sliding_window`."""
    if raw.get("use_sliding_window") is False:
        return None
    return raw.get("sliding_window")


def _layer_types(raw: dict[str, Any]) -> tuple[str, ...]:
    return tuple(raw.get("layer_types") or ())


def _moe_config(raw: dict[str, Any]) -> MoEConfig | None:
    num_experts = raw.get("num_local_experts") or raw.get("num_experts")
    if not num_experts:
        return None
    return MoEConfig(
        num_experts=num_experts,
        top_k=raw["num_experts_per_tok"],
        intermediate_size=raw.get("moe_intermediate_size") or raw["intermediate_size"],
        # Mixtral always renormalizes the selected weights; Qwen-MoE configs say whether to.
        renormalize=bool(raw.get("norm_topk_prob", True)),
        shared_expert_intermediate_size=raw.get("shared_expert_intermediate_size") or 0,
        sparse_step=raw.get("decoder_sparse_step") or 1,
        dense_layers=tuple(raw.get("mlp_only_layers") or ()),
    )
