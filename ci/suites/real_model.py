"""Greedy decoding of the embedded model (SmolLM2-135M-Instruct) through our runner, step by step.

The chat prompts every real-model check uses, and the decode loop: a prefill, then one token
per step over the paged-KV path, as the server runs it, until the end token or the budget.
"""

from __future__ import annotations

import torch

from sglang.ops.attention import AttentionInputs
from sglang.ops.step import StepInputs
from sglang.runtime.execution.model_runner import ModelRunner
from sglang.runtime.loader.model_loading import LoadedModel

PROMPTS = (
    "What is the capital of France?",
    "Name three primary colors.",
    "Write one sentence about the sea.",
)
MAX_NEW_TOKENS = 16


def chat_ids(tokenizer, question: str) -> list[int]:
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], tokenize=False, add_generation_prompt=True
    )
    return tokenizer.encode(text, add_special_tokens=False)


def greedy_ours(loaded: LoadedModel, prompt: list[int], eos: int) -> list[int]:
    runner = ModelRunner(loaded.model, loaded.platform, num_slots=len(prompt) + MAX_NEW_TOKENS + 1)
    slots = torch.arange(1, len(prompt) + MAX_NEW_TOKENS + 1)
    tokens = list(prompt)
    new: list[int] = []
    extend = len(prompt)
    while len(new) < MAX_NEW_TOKENS:
        n = len(tokens)
        step = StepInputs(
            input_ids=torch.tensor(tokens[n - extend :]),
            positions=torch.arange(n - extend, n),
            attention=AttentionInputs((n,), (extend,), slots[:n]),
            logit_rows=torch.tensor([extend - 1]),
        )
        token = int(runner.forward(step)[0].argmax())
        new.append(token)
        tokens.append(token)
        extend = 1
        if token == eos:
            break
    return new
