"""bf16 on the tpu platform (XLA:CPU): the jax kernels accumulate in fp32 where torch does, and the
embedded model's bf16 logits are as close to fp32 as torch's own bf16 ones.

Why bf16 greedy text differs from the cpu platform's: XLA keeps excess precision (a bf16 op whose
consumer is in f32 is not rounded to bf16 in between; `xla_allow_excess_precision` defaults to
true), where torch rounds every op's output to bf16. Neither is less precise than the other (the
second test measures it); the chat prompts' greedy answers part ways only where fp32's top two
tokens are less than one bf16 step of the logit apart.
"""

from __future__ import annotations

import numpy as np
import torch

from sglang.ci.suites.real_model import PROMPTS, chat_ids
from sglang.ops.attention import AttentionInputs
from sglang.ops.step import StepInputs
from sglang.runtime.execution.model_runner import ModelRunner
from sglang.runtime.loader.model_loading import LoadedModel, load_model
from sglang.runtime.server_args import ServerArgs

BF16_STEP = 2.0**-7
"""bf16's spacing relative to a value's magnitude (8 significant bits)."""


def test_ragged_attention_bf16_is_fp32_attention_rounded_once(xla_cpu: None) -> None:
    """Scores, softmax and the value sum are fp32 on bf16 inputs: the bf16 output is the fp32
    kernel's output on the same values, rounded once. Rounding the scores or the probabilities to
    bf16 instead is off by hundreds of steps."""
    import jax.numpy as jnp

    from sglang.platforms.kernels.jax.ragged_attention import ragged_paged_attention

    rng = np.random.default_rng(0)
    tokens, q_heads, kv_heads, head_dim, page_size = 48, 8, 2, 64, 16
    queries, keys, values = (
        rng.standard_normal((tokens, h, head_dim), np.float32) * 2 for h in (q_heads, kv_heads, kv_heads)
    )
    cache = rng.standard_normal((8, page_size, 2 * kv_heads, head_dim), np.float32)
    # A 40-token prefill and an 8-token chunk over a 12-token prefix, then two padded sequences.
    contract = {
        "kv_lens": np.array([40, 20, 0, 0], np.int32),
        "page_indices": np.array([[1, 2, 3, 0], [4, 5, 0, 0], [0] * 4, [0] * 4], np.int32),
        "cu_q_lens": np.array([0, 40, 48, 48, 48], np.int32),
        "distribution": np.array([0, 0, 2], np.int32),
    }

    def attend(dtype) -> np.ndarray:
        arrays = [jnp.asarray(x).astype(jnp.bfloat16).astype(dtype) for x in (queries, keys, values, cache)]
        out, _ = ragged_paged_attention(*arrays, **contract, sm_scale=head_dim**-0.5, max_q_len=40)
        return np.asarray(out.astype(jnp.float32))

    rounded = np.asarray(jnp.asarray(attend(jnp.float32)).astype(jnp.bfloat16).astype(jnp.float32))
    error = np.abs(attend(jnp.bfloat16) - rounded)
    # One step relative, with a floor of an eighth of a step absolute: where the value sum nearly
    # cancels (an output near 0), a CPU with native bf16 arithmetic (AVX512-BF16: XLA then takes
    # other kernels) lands a few 1e-4 away, which no relative bound allows.
    assert (error <= np.abs(rounded) * BF16_STEP + BF16_STEP / 8).all(), f"max error {error.max():.3g}"


def _first_step_logits(loaded: LoadedModel, prompt: list[int]) -> torch.Tensor:
    """Every prompt position's logits from one prefill step."""
    runner = ModelRunner(loaded.model, loaded.platform, num_slots=len(prompt) + 1)
    n = len(prompt)
    step = StepInputs(
        torch.tensor(prompt), torch.arange(n), AttentionInputs((n,), (n,), torch.arange(1, n + 1)), torch.arange(n)
    )
    return runner.forward(step).float()


def test_bf16_logits_are_as_close_to_fp32_as_torch_bf16(xla_cpu: None) -> None:
    """The embedded model's first chat prompt, one prefill: against the cpu platform's fp32
    logits, the tpu platform's bf16 ones err no more than the cpu platform's bf16 ones (measured:
    mean 0.139 against 0.149, max 1.21 against 1.20) and pick the same token at nearly every
    position (36 of 37: the last position is a near-tie, 0.08 apart in fp32)."""
    reference = load_model(ServerArgs(device="cpu", dtype="float32", cpu_threads=1))
    prompt = chat_ids(reference.load_tokenizer(), PROMPTS[0])
    fp32 = _first_step_logits(reference, prompt)
    torch_bf16 = (_first_step_logits(load_model(ServerArgs(device="cpu", dtype="bfloat16")), prompt) - fp32).abs()
    ours = _first_step_logits(load_model(ServerArgs(device="tpu", dtype="bfloat16")), prompt)
    tpu_bf16 = (ours - fp32).abs()
    assert tpu_bf16.mean() <= 1.05 * torch_bf16.mean(), (tpu_bf16.mean(), torch_bf16.mean())
    assert tpu_bf16.max() <= 1.25 * torch_bf16.max(), (tpu_bf16.max(), torch_bf16.max())
    assert (ours.argmax(-1) == fp32.argmax(-1)).float().mean() >= 0.9
