"""The tpu platform's jitted steps on XLA:CPU: logits match transformers for every supported
architecture, KV buffers are donated and replaced, compilations stay bounded by the buckets, and
a shape that fails to compile fails only its own steps."""

from __future__ import annotations

import pytest
import torch

from sglang.ci.suites.model_harness import FP32_ATOL
from sglang.ops.step import StepError
from sglang.platforms import PlatformError, select_platform

from .tiny_models import SPEC_NAMES, Feeder, checkpoint, runner_for


@pytest.fixture(scope="module")
def ckpt_root(tmp_path_factory: pytest.TempPathFactory):
    return tmp_path_factory.mktemp("tpu-models")


SLOW_SPECS = ("deepseek-v2-mla", "gpt-oss-sinks")
"""Left to the slow run (CI budget): op parity covers the jax attention's sinks and MLA by default."""


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_SPECS else n for n in SPEC_NAMES]
)
def test_fp32_logits_match_transformers(name: str, ckpt_root, xla_cpu: None) -> None:
    """Prefill all but the last two tokens of every prompt in one ragged step, then two decode
    steps: every token's logits against transformers' full-sequence forward."""
    ckpt = checkpoint(name, ckpt_root)
    runner = runner_for(ckpt, select_platform("tpu"))
    feeder = Feeder(runner, ckpt.prompts)
    lens = [len(p) for p in ckpt.prompts]
    got = [[chunk] for chunk in feeder.step([(i, 0, n - 2) for i, n in enumerate(lens)])]
    for offset in (2, 1):
        for i, chunk in enumerate(feeder.step([(i, n - offset, n - offset + 1) for i, n in enumerate(lens)])):
            got[i].append(chunk)
    for i, reference in enumerate(ckpt.reference):
        ours = torch.cat(got[i])
        assert ours.shape == reference.shape
        error = (ours - reference).abs().max().item()
        assert error < FP32_ATOL * 10, f"{name} prompt {i}: max abs error {error}"


def test_an_attention_without_in_step_metadata_is_refused_at_start(ckpt_root, xla_cpu: None) -> None:
    """The reference attention plans on the host, which a jitted step cannot: refused with the reason."""
    with pytest.raises(PlatformError, match="jitted steps need an attention backend"):
        runner_for(checkpoint("llama", ckpt_root), select_platform("tpu"), force_reference=True)


def test_kv_buffers_are_donated_and_replaced(ckpt_root, xla_cpu: None) -> None:
    ckpt = checkpoint("llama", ckpt_root)
    runner = runner_for(ckpt, select_platform("tpu"))
    before = list(runner.kv_buffers)
    Feeder(runner, ckpt.prompts).step([(0, 0, 5)])
    assert all(b.jax().is_deleted() for b in before), "the step's KV buffers were not donated"
    assert all(not b.jax().is_deleted() for b in runner.kv_buffers)
    assert all(a is not b for a, b in zip(before, runner.kv_buffers))


def test_decode_batches_share_bucket_shapes(ckpt_root, xla_cpu: None) -> None:
    """Batches of 1..5 decode rows at many lengths compile one shape per batch bucket."""
    ckpt = checkpoint("llama", ckpt_root)
    runner = runner_for(ckpt, select_platform("tpu"))
    prompts = [torch.randint(0, ckpt.config.vocab_size, (40,)) for _ in range(5)]
    feeder = Feeder(runner, prompts)
    feeder.step([(i, 0, 10 + i) for i in range(5)])
    lengths = [10 + i for i in range(5)]
    for batch in (1, 2, 3, 4, 5, 5, 3, 1):
        feeder.step([(i, lengths[i], lengths[i] + 1) for i in range(batch)])
        lengths[:batch] = [n + 1 for n in lengths[:batch]]
    shapes = [r.shape for r in runner.step_runner.records]
    assert len(shapes) == len(set(shapes)), "a shape was compiled twice"
    # The prefill (60 tokens of 5 sequences), then one decode shape per batch bucket 1, 2, 4, 8.
    assert [(s.tokens, s.ragged.num_seqs) for s in shapes] == [(64, 8), (1, 1), (2, 2), (4, 4), (8, 8)]


def test_a_shape_that_fails_to_compile_fails_only_its_steps(ckpt_root, xla_cpu: None, monkeypatch) -> None:
    ckpt = checkpoint("llama", ckpt_root)
    runner = runner_for(ckpt, select_platform("tpu"))
    executor = runner.step_runner
    original, calls = executor._function, []

    def failing_for_prefill(max_q_len: int):
        calls.append(max_q_len)
        if max_q_len > 1:
            raise RuntimeError("XLA refused this shape")
        return original(max_q_len)

    monkeypatch.setattr(executor, "_function", failing_for_prefill)
    for _ in range(2):
        with pytest.raises(StepError, match="failed to compile: RuntimeError: XLA refused this shape"):
            Feeder(runner, ckpt.prompts).step([(0, 0, 5)])
    assert calls == [16], "a failed shape must not be compiled again"
    assert not any(b.jax().is_deleted() for b in runner.kv_buffers), "a failed step must not consume the KV"
    (logits,) = Feeder(runner, ckpt.prompts).step([(1, 0, 1)])  # a one-token sequence is a decode shape
    assert torch.isfinite(logits).all()
