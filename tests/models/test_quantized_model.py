"""The embedded model served as its GGUF is: Q4_1 linears as int4, the Q8_0 embedding as int8.

Greedy answers still name Paris; last-token logits stay within 2e-3 of the dequantized float32
model's (measured: 4.8e-5; the weights are the same values, only float32 summation order
differs, so a larger gap means a kernel or repacking error, not quantization noise).
"""

from __future__ import annotations

import pytest
import torch

from sglang.ci.suites.real_model import PROMPTS, chat_ids, greedy_ours
from sglang.ops.attention import AttentionInputs
from sglang.ops.quant import QuantizedWeight
from sglang.runtime.model_loading import LoadedModel, load_model
from sglang.runtime.model_runner import ModelRunner, StepInputs
from sglang.runtime.server_args import ServerArgs

LOGIT_TOLERANCE = 2e-3


@pytest.fixture(scope="module")
def quantized() -> LoadedModel:
    return load_model(ServerArgs(device="cpu"))


@pytest.fixture(scope="module")
def dense() -> LoadedModel:
    return load_model(ServerArgs(device="cpu", dtype="float32"))


def last_logits(loaded: LoadedModel, prompt: list[int]) -> torch.Tensor:
    n = len(prompt)
    runner = ModelRunner(loaded.model, loaded.platform, num_slots=n + 1)
    step = StepInputs(torch.tensor(prompt), torch.arange(n), AttentionInputs((n,), (n,), torch.arange(1, n + 1)),
                      torch.tensor([n - 1]))  # fmt: skip
    return runner.forward(step)[0]


def test_gguf_is_served_quantized_by_default(quantized: LoadedModel, dense: LoadedModel) -> None:
    layer = quantized.model.model.layers[0]
    assert isinstance(layer.self_attn.qkv_proj.weight, QuantizedWeight)
    assert layer.mlp.down_proj.weight.format.name == "int4_g32"
    assert quantized.model.lm_head.weight is quantized.model.model.embed_tokens.weight
    assert quantized.op_table["linear"].chosen.family == "cpu_quant"
    assert isinstance(dense.model.model.layers[0].self_attn.qkv_proj.weight, torch.nn.Parameter)


def test_quantized_answers_name_paris(quantized: LoadedModel) -> None:
    tokenizer = quantized.load_tokenizer()
    answers = [tokenizer.decode(greedy_ours(quantized, chat_ids(tokenizer, q), tokenizer.eos_token_id),
                                skip_special_tokens=True) for q in PROMPTS]  # fmt: skip
    assert "Paris" in answers[0], answers
    assert all(a.strip() for a in answers), answers


def test_logits_match_the_dequantized_model(quantized: LoadedModel, dense: LoadedModel) -> None:
    tokenizer = quantized.load_tokenizer()
    worst = 0.0
    for question in (*PROMPTS, "List the planets of the solar system."):
        prompt = chat_ids(tokenizer, question)
        got, expected = last_logits(quantized, prompt), last_logits(dense, prompt)
        assert got.argmax() == expected.argmax(), question
        worst = max(worst, (got - expected).abs().max().item())
    print(f"max |logit difference| quantized vs dequantized float32: {worst:.2e}")
    assert worst < LOGIT_TOLERANCE
