"""Compiled decode on cpu (`SGLANG_CPU_COMPILE_DECODE=1`) gives the eager step's greedy tokens.

The embedded model, served quantized, decodes five chat prompts of different lengths through the
graph runner with inductor-compiled buckets (1, 2, 4, 8) and through the eager step. Rows leave
one by one, so the batch runs as bucket 8 (5 rows, 3 padded), then 4 (4 and 3 rows: across a
bucket boundary), 2 and 1. Every row's tokens must match the eager ones exactly: the padding
writes only the scratch slot, and the kernels' results do not depend on the batch size.
Slow: a cold compile takes minutes on 2 cores (the inductor cache under ~/.cache makes reruns
take seconds per graph).
"""

from __future__ import annotations

import pytest
import torch

from sglang.ops.attention import AttentionInputs
from sglang.platforms.cpu.platform import COMPILE_ENV, CpuPlatform
from sglang.runtime.batch_buckets import BucketPolicy
from sglang.runtime.graph_runner import GraphRunner
from sglang.runtime.model_loading import load_model
from sglang.runtime.model_runner import ModelRunner, StepInputs
from sglang.runtime.server_args import ServerArgs

pytestmark = pytest.mark.slow

QUESTIONS = ("What is the capital of France?", "Name three primary colors.", "Write one sentence about the sea.",
             "Count to five.", "What is two plus two? Answer briefly.")  # fmt: skip
SPAN = 96
STEPS = 10


def greedy(runner: ModelRunner, prompts: list[list[int]]) -> list[list[int]]:
    """Prefill each prompt, then decode all rows together; row i stops after STEPS - i tokens."""
    rows = [list(p) for p in prompts]
    slots = [torch.arange(1 + i * SPAN, 1 + (i + 1) * SPAN) for i in range(len(prompts))]
    out: list[list[int]] = [[] for _ in prompts]
    for i, tokens in enumerate(rows):
        n = len(tokens)
        step = StepInputs(torch.tensor(tokens), torch.arange(n), AttentionInputs((n,), (n,), slots[i][:n]),
                          torch.tensor([n - 1]))  # fmt: skip
        out[i].append(int(runner.forward(step)[0].argmax()))
    for t in range(1, STEPS):
        live = [i for i in range(len(rows)) if t < STEPS - i]
        lens = tuple(len(rows[i]) + len(out[i]) for i in live)
        step = StepInputs(
            input_ids=torch.tensor([out[i][-1] for i in live]),
            positions=torch.tensor([n - 1 for n in lens]),
            attention=AttentionInputs(lens, (1,) * len(live), torch.cat([slots[i][:n] for i, n in zip(live, lens)])),
            logit_rows=torch.arange(len(live)),
        )
        for i, token in zip(live, runner.forward(step).argmax(-1).tolist()):
            out[i].append(token)
    return out


def test_compiled_buckets_match_eager(monkeypatch) -> None:
    loaded = load_model(ServerArgs(device="cpu"))
    tokenizer = loaded.load_tokenizer()
    prompts = [tokenizer.encode(tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False,
                                add_generation_prompt=True), add_special_tokens=False) for q in QUESTIONS]  # fmt: skip
    slots = len(prompts) * SPAN + 1
    monkeypatch.delenv(COMPILE_ENV, raising=False)
    eager = greedy(ModelRunner(loaded.model, CpuPlatform(), slots), prompts)
    monkeypatch.setenv(COMPILE_ENV, "1")
    runner = ModelRunner(loaded.model, CpuPlatform(), slots, graph_buckets=BucketPolicy((1, 2, 4, 8)))
    assert isinstance(runner.graph_runner, GraphRunner)
    assert greedy(runner, prompts) == eager
    assert runner.graph_runner.captured_buckets == (1, 2, 4, 8)
