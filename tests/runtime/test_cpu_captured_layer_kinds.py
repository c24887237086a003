"""Captured (traced) decode on cpu for the layer kinds beyond plain attention: sliding windows
with attention sinks (gpt-oss) and multi-head latent attention with grouped expert routing
(DeepSeek V2). The cpu_cpp decode kernels serve them, so their decode buckets are captured
instead of refused, and greedy tokens and logits equal the eager steps'. Its experts check
that a traced step does not keep the traced step's routing: torch_native's sparse experts read
the routing on the host, and run their dense form under trace (before that fix every decode step
after the first replayed the first one's expert choice; logits differed by up to 0.8).

A tiny random gpt-oss decoder (two layers: windowed with sinks, global with sinks; window 4,
shorter than every prompt) decodes three prompts for six steps in bucket 4 (three rows, one
padded), traced, and eagerly (a few seconds). The runner's startup log says the windowed layer
keeps every token (no window pool: captured steps read one slot table). A tiny DeepSeek V2 (the
model parity suite's) does the same through the latent pool kernel: its routing picks groups
with Python-level shape checks and a mask, which once failed to trace, so every captured decode
step failed."""

from __future__ import annotations

import logging

import pytest
import torch

from sglang.ci.suites.model_harness import SPECS_BY_NAME, TargetSpec, bound_ops
from sglang.ops.attention import AttentionInputs
from sglang.ops.buckets import BucketPolicy
from sglang.ops.step import StepInputs
from sglang.platforms.cpu.platform import CpuPlatform
from sglang.platforms.execution.captured import CapturedStepRunner
from sglang.platforms.kernels.cpu_cpp.attention import PoolDecodeAttention
from sglang.platforms.kernels.cpu_cpp.mla import PoolDecodeMLA
from sglang.runtime.execution.model_runner import ModelRunner
from sglang.runtime.models.config import ModelConfig
from sglang.runtime.models.registry import model_class_for

GPT_OSS = {
    "architectures": ["GptOssForCausalLM"],
    "model_type": "gpt_oss",
    "hidden_size": 64,
    "intermediate_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 97,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "sliding_window": 4,
    "layer_types": ["sliding_attention", "full_attention"],
    "max_position_embeddings": 128,
}
PROMPTS = [[5, 9, 13, 2, 7, 30, 31], [3, 3, 8, 60, 1], [11, 40, 8, 1, 60, 33, 2, 9, 4]]
SPAN = 40
NUM_SLOTS = 1 + 3 * SPAN


def _step(tokens: list[list[int]], new: list[int]) -> StepInputs:
    """Each sequence's tokens so far, the last `new[i]` of them new; sequence `i` owns the slots
    `1 + i * SPAN ...` (slot 0 is the scratch slot padded rows write)."""
    ids = [t for seq, n in zip(tokens, new) for t in seq[len(seq) - n :]]
    positions = [p for seq, n in zip(tokens, new) for p in range(len(seq) - n, len(seq))]
    slots = torch.cat([torch.arange(1 + i * SPAN, 1 + i * SPAN + len(s)) for i, s in enumerate(tokens)])
    attention = AttentionInputs(tuple(len(s) for s in tokens), tuple(new), slots)
    return StepInputs(torch.tensor(ids), torch.tensor(positions), attention, torch.tensor(new).cumsum(0) - 1)


def _decode(runner: ModelRunner, prompts: list[list[int]], steps: int) -> tuple[list[list[int]], torch.Tensor]:
    """Greedy tokens after a prefill and `steps` decode steps, and every decode step's logits."""
    tokens = [list(p) for p in prompts]
    logits = runner.forward(_step(tokens, [len(p) for p in prompts]))
    seen = []
    for _ in range(steps):
        for seq, token in zip(tokens, logits.argmax(-1).tolist()):
            seq.append(token)
        logits = runner.forward(_step(tokens, [1] * len(tokens)))
        seen.append(logits.clone())  # the next forward may overwrite them (the step contract)
    return tokens, torch.stack(seen)


def _random_model(config: ModelConfig) -> torch.nn.Module:
    model = model_class_for(config)(config, torch.float32)
    gen = torch.Generator().manual_seed(0)
    for param in model.parameters():
        param.data = torch.randn(param.shape, generator=gen) * 0.2
    return model


def _assert_captured_matches_eager(eager: ModelRunner, captured: ModelRunner) -> None:
    """Three prompts, six decode steps in bucket 4 (three rows, one padded): same tokens and
    logits, every decode step replayed."""
    assert isinstance(captured.step_runner, CapturedStepRunner)
    expected, expected_logits = _decode(eager, PROMPTS, steps=6)
    actual, logits = _decode(captured, PROMPTS, steps=6)
    assert actual == expected
    torch.testing.assert_close(logits, expected_logits, atol=1e-4, rtol=1e-4)
    stats = captured.step_runner.stats
    assert stats.captured_buckets == [4] and stats.static_steps == 6 and stats.static_fallbacks == 0


def test_windowed_layers_with_sinks_are_captured_and_match_eager(caplog: pytest.LogCaptureFixture) -> None:
    config = ModelConfig.from_dict(GPT_OSS)
    assert config.attention_sinks and config.sliding_window_for(0) == 4 and config.sliding_window_for(1) is None
    with bound_ops(TargetSpec("cpu")) as target:
        target.bind_for(config, torch.float32)
        model = _random_model(config)
        with caplog.at_level(logging.INFO, logger="sglang.runtime.execution.model_runner"):
            eager = ModelRunner(model, CpuPlatform(), NUM_SLOTS)
        assert "1 of 2 layers are windowed (window 4) and keep every token" in caplog.text
        captured = ModelRunner(model, CpuPlatform(), NUM_SLOTS, graph_buckets=BucketPolicy((1, 2, 4)))
        assert isinstance(captured.attn_backend, PoolDecodeAttention)
        _assert_captured_matches_eager(eager, captured)


def test_latent_attention_with_grouped_routing_is_captured_and_matches_eager() -> None:
    config = ModelConfig.from_dict(SPECS_BY_NAME["deepseek-v2-mla"].hf_config().to_dict())
    with bound_ops(TargetSpec("cpu")) as target:
        target.bind_for(config, torch.float32)
        model = _random_model(config)
        eager = ModelRunner(model, CpuPlatform(), NUM_SLOTS)
        captured = ModelRunner(model, CpuPlatform(), NUM_SLOTS, graph_buckets=BucketPolicy((1, 2, 4)))
        assert isinstance(captured.attn_backend, PoolDecodeMLA)
        _assert_captured_matches_eager(eager, captured)
