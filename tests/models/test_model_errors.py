"""Clear errors for what cannot be served: unknown architectures, bad checkpoints, rope kinds."""

from __future__ import annotations

import re

import pytest
import torch

from sglang.ci.suites.model_harness import CheckpointStore
from sglang.runtime.models.config import ModelConfig
from sglang.runtime.models.decoder import DecoderForCausalLM
from sglang.runtime.models.registry import ARCHITECTURES, UnsupportedArchitectureError, model_class_for
from sglang.runtime.models.weights import WeightLoadError

RAW_CONFIG = {
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 128,
}


def _config(**overrides: object) -> ModelConfig:
    return ModelConfig.from_dict({**RAW_CONFIG, **overrides})


def _load(checkpoint_weights: dict[str, torch.Tensor], config: ModelConfig) -> DecoderForCausalLM:
    model = model_class_for(config)(config, torch.float32)
    model.load_weights(checkpoint_weights.items())
    return model


@pytest.mark.parametrize("architectures", [["GPT2LMHeadModel"], ["FalconForCausalLM", "PhiForCausalLM"]])
def test_unknown_architecture_lists_supported_ones(architectures: list[str]) -> None:
    with pytest.raises(UnsupportedArchitectureError) as info:
        model_class_for(_config(architectures=architectures))
    message = str(info.value)
    for name in architectures:
        assert name in message
    for supported in ARCHITECTURES:
        assert supported in message
    assert isinstance(info.value, ValueError)


def test_missing_architectures_field_is_unsupported() -> None:
    with pytest.raises(UnsupportedArchitectureError, match=r"architecture none is not supported"):
        model_class_for(_config())


def test_first_supported_architecture_is_chosen() -> None:
    cls = model_class_for(_config(architectures=["SomethingElse", "Qwen3ForCausalLM", "LlamaForCausalLM"]))
    assert cls.__name__ == "Qwen3ForCausalLM"


def test_every_registered_architecture_resolves_to_a_decoder() -> None:
    for name in ARCHITECTURES:
        cls = model_class_for(_config(architectures=[name]))
        assert cls.__name__ == name and issubclass(cls, DecoderForCausalLM)


@pytest.mark.parametrize(
    ("spec", "dropped", "named"),
    [
        ("llama", "model.layers.1.mlp.down_proj.weight", "model.layers.1.mlp.down_proj.weight"),
        ("llama", "lm_head.weight", "lm_head.weight"),
        ("llama", "model.norm.weight", "model.norm.weight"),
        # A missing piece of a fused parameter names the fused parameter (see the report).
        ("llama", "model.layers.0.self_attn.k_proj.weight", "model.layers.0.self_attn.qkv_proj.weight"),
        ("qwen2-bias", "model.layers.1.self_attn.v_proj.bias", "model.layers.1.self_attn.qkv_proj.bias"),
        ("mixtral", "model.layers.0.block_sparse_moe.experts.2.w3.weight", "model.layers.0.mlp.experts.gate_up_proj"),
    ],
)
def test_missing_tensor_is_named(spec: str, dropped: str, named: str, checkpoints: CheckpointStore) -> None:
    checkpoint = checkpoints.get(spec)
    weights = dict(checkpoint.weights)
    assert dropped in weights, f"the fixture checkpoint has no {dropped}"
    del weights[dropped]
    with pytest.raises(WeightLoadError, match=re.escape(named)):
        _load(weights, checkpoint.config)


@pytest.mark.parametrize(
    ("spec", "tensor", "shape"),
    [
        ("llama", "model.layers.0.self_attn.o_proj.weight", (64, 32)),
        ("llama", "model.layers.0.self_attn.v_proj.weight", (33, 64)),  # a piece of the fused qkv_proj
        ("llama", "model.embed_tokens.weight", (127, 64)),
        ("mixtral", "model.layers.1.block_sparse_moe.experts.0.w2.weight", (64, 95)),
    ],
)
def test_shape_mismatch_is_named(spec: str, tensor: str, shape: tuple[int, ...], checkpoints: CheckpointStore) -> None:
    checkpoint = checkpoints.get(spec)
    weights = dict(checkpoint.weights)
    expected = tuple(weights[tensor].shape)
    assert expected != shape
    weights[tensor] = torch.zeros(shape)
    with pytest.raises(WeightLoadError) as info:
        _load(weights, checkpoint.config)
    message = str(info.value)
    assert tensor in message and str(shape) in message and str(expected) in message


def test_unexpected_tensor_is_named(checkpoints: CheckpointStore) -> None:
    checkpoint = checkpoints.get("llama")
    weights = {**checkpoint.weights, "model.layers.2.mlp.down_proj.weight": torch.zeros(64, 96)}
    with pytest.raises(WeightLoadError, match=re.escape("model.layers.2.mlp.down_proj.weight")):
        _load(weights, checkpoint.config)


def test_tensor_loaded_twice_is_an_error(checkpoints: CheckpointStore) -> None:
    checkpoint = checkpoints.get("llama")
    items = [*checkpoint.weights.items(), ("model.layers.0.mlp.up_proj.weight", torch.zeros(96, 64))]
    model = model_class_for(checkpoint.config)(checkpoint.config, torch.float32)
    with pytest.raises(WeightLoadError, match=r"gate_up_proj\.weight is filled more than once"):
        model.load_weights(items)


def test_unsupported_rope_scaling_lists_supported_kinds() -> None:
    # "su" is early Phi-3 configs' name for longrope.
    with pytest.raises(ValueError, match=r"'su' is not supported.*default.*linear.*dynamic.*llama3.*yarn"):
        _config(architectures=["LlamaForCausalLM"], rope_scaling={"rope_type": "su", "factor": 4.0})
