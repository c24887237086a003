"""DeepSeek V2/V3 (`deepseek2`) and GLM-4-MoE (`glm4moe`) from GGUF: what only these families
have. Their weights and logits are checked with the other families in `test_gguf_families`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from sglang.runtime.loader import open_model_source
from sglang.runtime.loader.gguf_file import GGUFFile
from sglang.runtime.loader.gguf_quantized import quantized_tensors

from .gguf_family_models import Built, family_builder
from .gguf_family_synth import write_family_gguf


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Built]:
    return family_builder(tmp_path_factory)


_MLA_KEYS = ("kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
_ROUTING_KEYS = (
    "num_key_value_heads",
    "n_routed_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "intermediate_size",
    "n_shared_experts",
    "first_k_dense_replace",
    "routed_scaling_factor",
    "norm_topk_prob",
    "n_group",
    "topk_group",
)


def _assert_routing(config: dict[str, Any], expected: Any) -> None:
    for key in _ROUTING_KEYS:
        assert config[key] == getattr(expected, key), key


def _assert_deepseek_config(config: dict[str, Any], expected: Any) -> None:
    """MLA dims, routing and yarn as the transformers config has them (the file says one KV head)."""
    _assert_routing(config, expected)
    for key in _MLA_KEYS:
        assert config[key] == getattr(expected, key), key
    v3 = expected.model_type == "deepseek_v3"
    assert config["topk_method"] == ("noaux_tc" if v3 else expected.topk_method)
    assert config["scoring_func"] == ("sigmoid" if v3 else "softmax")
    rope = expected.rope_parameters
    assert config["rope_scaling"] == {
        "rope_type": "yarn",
        **{k: rope[k] for k in ("factor", "original_max_position_embeddings", "mscale", "mscale_all_dim")},
        "beta_fast": rope["beta_fast"],
        "beta_slow": rope["beta_slow"],
    }


@pytest.mark.parametrize("name", ["deepseek-v2", "deepseek-v3", "glm4moe"])
def test_config_comes_from_the_gguf_metadata(name: str, build, tmp_path: Path) -> None:
    """MLA dims, routing, yarn, partial rotary and the layer count as transformers' config has them."""
    hf_model, gguf_path = build(name)
    config, expected = open_model_source(gguf_path, "auto", cache_dir=tmp_path).config, hf_model.config
    assert config["architectures"] == expected.architectures
    if name.startswith("deepseek"):
        _assert_deepseek_config(config, expected)
    if name == "glm4moe":
        _assert_routing(config, expected)
        # The file's block_count counts the multi-token-prediction layer; the config does not.
        assert "blk.3.nextn.eh_proj.weight" in GGUFFile.open(gguf_path).tensors
        assert config["num_hidden_layers"] == expected.num_hidden_layers
        assert config["partial_rotary_factor"] == expected.rope_parameters["partial_rotary_factor"]
        assert (config["use_qk_norm"], config["attention_bias"]) == (True, True)
        assert (config["topk_method"], config["scoring_func"]) == ("noaux_tc", "sigmoid")


def test_deepseek_unsplit_kv_b_files_load_like_split_ones(build, tmp_path: Path) -> None:
    """Files from converters before llama.cpp's MLA split (one `attn_kv_b`, the real KV heads and
    head dims as `key_length` / `value_length`, no group or gating keys) give the same tensors,
    and the same config but for routing they cannot state: V2 without groups is plain greedy."""
    hf_model, split_path = build("deepseek-v2")
    legacy_path = tmp_path / "deepseek-v2-legacy.gguf"
    write_family_gguf(legacy_path, "deepseek2", hf_model, legacy_mla=True)
    assert "blk.0.attn_kv_b.weight" in GGUFFile.open(legacy_path).tensors
    legacy = open_model_source(legacy_path, "float32", cache_dir=tmp_path / "legacy")
    split = open_model_source(split_path, "float32", cache_dir=tmp_path / "split")
    legacy_weights, split_weights = dict(legacy.weights()), dict(split.weights())
    assert legacy_weights.keys() == split_weights.keys()
    assert all(torch.equal(legacy_weights[name], tensor) for name, tensor in split_weights.items())
    routing = {"topk_method": "greedy", "n_group": 1, "topk_group": 1}
    assert legacy.config == {**split.config, **routing}


def test_deepseek_q8_0_keeps_matrices_and_dequantizes_per_head_tensors(build, tmp_path: Path) -> None:
    """Q8_0 `attn_q_a` is kept int8, while the 3-D per-head `attn_v_b` is not (no Linear takes it):
    it is dequantized and joined with `attn_k_b` into `kv_b_proj`, the rows transformers has after
    Q8_0 rounding. (Served with dtype auto, such a file's q_a/kv_a/o layers are int8 and its
    logits equal the float32 load's; checked by hand, error 0.0.)"""
    hf_model, _ = build("deepseek-v3")
    path = tmp_path / "deepseek-q8.gguf"
    write_family_gguf(path, "deepseek2", hf_model, q8_0=("attn_q_a", "attn_v_b"))
    kept = quantized_tensors(path, tmp_path / "kept")
    assert sorted(kept) == [f"model.layers.{i}.self_attn.q_a_proj.weight" for i in range(3)]
    dense = dict(open_model_source(path, "float32", cache_dir=tmp_path / "dense").weights())
    assert torch.equal(
        kept["model.layers.1.self_attn.q_a_proj.weight"].dequantize(), dense["model.layers.1.self_attn.q_a_proj.weight"]
    )
    kv_b = dense["model.layers.1.self_attn.kv_b_proj.weight"].view(4, 16 + 24, 32)
    expected = hf_model.state_dict()["model.layers.1.self_attn.kv_b_proj.weight"].view(4, 16 + 24, 32)
    assert torch.equal(kv_b[:, :16], expected[:, :16])  # attn_k_b stayed F32
    assert (kv_b[:, 16:] - expected[:, 16:]).abs().max() < 0.01  # attn_v_b went through Q8_0
