"""The embedded model served as its GGUF is: Q4_1 linears as int4, the Q8_0 embedding as int8.

Greedy answers still name Paris. Last-token logits, from a prefill step or a decode step, stay
within 1e-2 of the dequantized float32 model's and pick the same token. The weights are the same
values; what differs is float32 summation order and, where a linear gets few rows (decode, and
lm_head on the one row a prefill samples), activations rounded to int16 per 32-value block
(measured: 1.3e-3 after a prefill, 4.1e-3 after a decode step of three rows, all of whose linears
take int16 activations). A larger gap means a kernel or repacking error, not quantization noise.
"""

from __future__ import annotations

import pytest
import torch

from sglang.ci.suites.real_model import PROMPTS, chat_ids, greedy_ours
from sglang.ops.attention import AttentionInputs
from sglang.ops.binding import install
from sglang.ops.quant import QuantizedWeight
from sglang.ops.step import StepInputs
from sglang.platforms.kernels.cpu_cpp.linear import TILES
from sglang.runtime.execution.model_runner import ModelRunner
from sglang.runtime.loader.model_loading import LoadedModel, load_model
from sglang.runtime.server_args import ServerArgs

LOGIT_TOLERANCE = 1e-2


@pytest.fixture(scope="module")
def quantized() -> LoadedModel:
    return load_model(ServerArgs(device="cpu"))


@pytest.fixture(scope="module")
def dense() -> LoadedModel:
    return load_model(ServerArgs(device="cpu", dtype="float32"))


def last_logits(loaded: LoadedModel, prompt: list[int], decode_last: bool = False) -> torch.Tensor:
    """The last token's logits: all of the prompt in one prefill step, or with `decode_last` its
    last token as a decode step (one row) over the rest prefilled."""
    # Op bindings are process-wide and the last model loaded bound them: bind this model's.
    install(loaded.op_table, loaded.platform.kernel_tuning)
    n = len(prompt)
    runner = ModelRunner(loaded.model, loaded.platform, num_slots=n + 1)
    slots = torch.arange(1, n + 1)
    first = n - 1 if decode_last else n
    prefill = AttentionInputs((first,), (first,), slots[:first])
    step = StepInputs(torch.tensor(prompt[:first]), torch.arange(first), prefill, torch.tensor([first - 1]))
    logits = runner.forward(step)[0]
    if not decode_last:
        return logits
    step = StepInputs(
        torch.tensor(prompt[-1:]), torch.tensor([n - 1]), AttentionInputs((n,), (1,), slots), torch.tensor([0])
    )
    return runner.forward(step)[0]


def test_gguf_is_served_quantized_by_default(quantized: LoadedModel, dense: LoadedModel) -> None:
    layer = quantized.model.model.layers[0]
    assert isinstance(layer.self_attn.qkv_proj.weight, QuantizedWeight)
    assert layer.mlp.down_proj.weight.format.name == "int4_g32"
    assert quantized.model.lm_head.weight is quantized.model.model.embed_tokens.weight
    assert quantized.op_table["linear"].chosen.family == "cpu_cpp"
    assert isinstance(dense.model.model.layers[0].self_attn.qkv_proj.weight, torch.nn.Parameter)


def test_kernel_records_are_built_at_load(quantized: LoadedModel) -> None:
    """The first request does not pay for the cpu kernel's weight records (0.2 s here)."""
    modules = quantized.model.modules()
    weights = {id(m.weight): m.weight for m in modules if isinstance(getattr(m, "weight", None), QuantizedWeight)}
    assert len(weights) == 121 and quantized.op_table["linear"].chosen.family == "cpu_cpp"
    assert all(TILES in weight.kernel_layouts for weight in weights.values())


def test_quantized_answers_name_paris(quantized: LoadedModel) -> None:
    install(quantized.op_table, quantized.platform.kernel_tuning)
    tokenizer = quantized.load_tokenizer()
    answers = [
        tokenizer.decode(
            greedy_ours(quantized, chat_ids(tokenizer, q), tokenizer.eos_token_id), skip_special_tokens=True
        )
        for q in PROMPTS
    ]
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


def test_decode_logits_match_the_dequantized_model(quantized: LoadedModel, dense: LoadedModel) -> None:
    tokenizer = quantized.load_tokenizer()
    worst = 0.0
    for question in (*PROMPTS, "List the planets of the solar system."):
        prompt = chat_ids(tokenizer, question)
        got, expected = last_logits(quantized, prompt, decode_last=True), last_logits(dense, prompt)
        assert got.argmax() == expected.argmax(), question
        worst = max(worst, (got - expected).abs().max().item())
    print(f"max |logit difference| of a decode step, int16 activations vs dequantized float32: {worst:.2e}")
    assert worst < LOGIT_TOLERANCE
