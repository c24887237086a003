"""Checkpoint facts the parity suite relies on: ties, biases from configs that omit them."""

from __future__ import annotations

import torch

from sglang.ci.suites.model_harness import CheckpointStore, load_model
from sglang.runtime.models.config import ModelConfig
from sglang.runtime.models.registry import model_class_for


def test_tied_checkpoint_shares_the_embedding(checkpoints: CheckpointStore) -> None:
    checkpoint = checkpoints.get("llama-tied")
    assert "lm_head.weight" not in checkpoint.weights
    model = load_model(checkpoint, torch.float32, torch.device("cpu"))
    assert model.lm_head.weight is model.model.embed_tokens.weight
    torch.testing.assert_close(model.lm_head.weight, checkpoint.weights["model.embed_tokens.weight"])


def test_tied_model_ignores_a_stored_lm_head(checkpoints: CheckpointStore) -> None:
    """Some tied checkpoints store `lm_head.weight` anyway; the embedding stays authoritative."""
    checkpoint = checkpoints.get("llama-tied")
    weights = {**checkpoint.weights, "lm_head.weight": torch.zeros(128, 64)}
    model = load_model(checkpoint, torch.float32, torch.device("cpu"))
    model.load_weights(weights.items())
    torch.testing.assert_close(model.lm_head.weight, checkpoint.weights["model.embed_tokens.weight"])


def test_untied_checkpoint_keeps_its_own_head(checkpoints: CheckpointStore) -> None:
    checkpoint = checkpoints.get("llama")
    model = load_model(checkpoint, torch.float32, torch.device("cpu"))
    assert model.lm_head.weight is not model.model.embed_tokens.weight
    torch.testing.assert_close(model.lm_head.weight, checkpoint.weights["lm_head.weight"])


def test_qwen2_configs_without_a_bias_key_get_qkv_biases(checkpoints: CheckpointStore) -> None:
    """Qwen2 (transformers hard-codes the biases) and Qwen2-MoE (older configs omit `qkv_bias`)
    checkpoints carry q/k/v biases whatever their config.json says about it."""
    for spec in ("qwen2-bias", "qwen2-moe-shared"):
        checkpoint = checkpoints.get(spec)
        raw = {k: v for k, v in checkpoint.config.raw.items() if k not in ("attention_bias", "qkv_bias")}
        config = ModelConfig.from_dict(raw)
        assert not config.attention_bias
        model = model_class_for(config)(config, torch.float32)
        model.load_weights(checkpoint.weights.items())
        assert model.config.attention_bias
        bias = model.model.layers[0].self_attn.qkv_proj.bias
        torch.testing.assert_close(bias[:64], checkpoint.weights["model.layers.0.self_attn.q_proj.bias"])


def test_config_that_disables_qkv_bias_is_respected(checkpoints: CheckpointStore) -> None:
    checkpoint = checkpoints.get("qwen2-moe-shared")
    config = ModelConfig.from_dict({**checkpoint.config.raw, "qkv_bias": False})
    model = model_class_for(config)(config, torch.float32)
    assert model.model.layers[0].self_attn.qkv_proj.bias is None


def test_the_loader_primes_every_moe_layer(checkpoints: CheckpointStore, monkeypatch) -> None:
    """The serving loader primes each MoE block after the weights load, before `build_runner` sizes
    the KV pool: without that call AITER's in-place expert shuffle would wait for the first
    request (issue 29; test_aiter_moe checks what priming does on the AITER stand-in)."""
    from sglang.ops.binding import restore, snapshot
    from sglang.runtime.layers.moe import SparseMoE
    from sglang.runtime.loader import model_loading
    from sglang.runtime.server_args import ServerArgs

    primed = []
    monkeypatch.setattr(SparseMoE, "prime", lambda self: primed.append(self))
    checkpoint = checkpoints.get("qwen3-moe")
    saved = snapshot()
    try:
        loaded = model_loading.load_model(ServerArgs(model_path=str(checkpoint.path), device="cpu"))
    finally:
        restore(saved)
    moe_layers = [m for m in loaded.model.modules() if isinstance(m, SparseMoE)]
    assert moe_layers and primed == moe_layers
