"""`ModelRunner.prepare_decode_buckets`: a speculative server captures the decode buckets its
verify steps use at startup, over the padding slot only. A tiny random Llama: after preparing
buckets 1-3, three prompts decode in bucket 3 with no further capture, and their greedy tokens
and logits equal the eager runner's: steps captured from padding rows alone serve real rows.
An eager runner prepares nothing."""

from __future__ import annotations

import torch

from sglang.ci.suites.model_harness import SPECS_BY_NAME, TargetSpec, bound_ops
from sglang.ops.buckets import BucketPolicy
from sglang.platforms.cpu.platform import CpuPlatform
from sglang.runtime.execution.model_runner import ModelRunner
from sglang.runtime.models.config import ModelConfig

from .test_cpu_captured_layer_kinds import NUM_SLOTS, PROMPTS, _decode, _random_model


def test_prepared_buckets_replay_without_capture_and_match_eager() -> None:
    config = ModelConfig.from_dict(SPECS_BY_NAME["llama"].hf_config().to_dict())
    with bound_ops(TargetSpec("cpu")) as target:
        target.bind_for(config, torch.float32)
        model = _random_model(config)
        eager = ModelRunner(model, CpuPlatform(), NUM_SLOTS)
        captured = ModelRunner(model, CpuPlatform(), NUM_SLOTS, graph_buckets=BucketPolicy((1, 2, 3, 4)))
        assert eager.prepare_decode_buckets(3) == []
        assert captured.prepare_decode_buckets(3) == [1, 2, 3]
        stats = captured.step_stats
        assert stats.captured_buckets == [1, 2, 3]
        expected, expected_logits = _decode(eager, PROMPTS, steps=6)
        static_before = stats.static_steps
        actual, logits = _decode(captured, PROMPTS, steps=6)
        assert actual == expected
        torch.testing.assert_close(logits, expected_logits, atol=1e-4, rtol=1e-4)
        assert stats.captured_buckets == [1, 2, 3] and stats.static_steps == static_before + 6
