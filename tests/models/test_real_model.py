"""The embedded SmolLM2-135M-Instruct: our runtime's greedy chat answers equal transformers'.

Our side loads the GGUF through the loader and the model registry and decodes through the
paged-KV attention path (prefill, then one token per step). transformers' side loads the
folder the loader converted the GGUF into (the loader's slow test checks that folder equals
transformers' own GGUF loading tensor for tensor); the slow variant loads the GGUF itself.
"""

from __future__ import annotations

import pytest
import torch

from sglang.ci.suites.real_model import MAX_NEW_TOKENS, PROMPTS, chat_ids, greedy_ours
from sglang.runtime.loader.model_loading import LoadedModel, load_model
from sglang.runtime.server_args import ServerArgs


@pytest.fixture(scope="module")
def ours() -> LoadedModel:
    return load_model(ServerArgs(device="cpu", dtype="float32"))


@pytest.fixture(scope="module")
def tokenizer(ours: LoadedModel):
    return ours.load_tokenizer()


def greedy_transformers(model, prompt: list[int], eos: int) -> list[int]:
    out = model.generate(
        torch.tensor([prompt]), max_new_tokens=MAX_NEW_TOKENS, do_sample=False, eos_token_id=eos, pad_token_id=eos
    )
    return out[0, len(prompt) :].tolist()


def check_same_answers(ours: LoadedModel, tokenizer, reference) -> None:
    eos = tokenizer.eos_token_id
    answers = []
    for question in PROMPTS:
        prompt = chat_ids(tokenizer, question)
        mine = greedy_ours(ours, prompt, eos)
        assert mine == greedy_transformers(reference, prompt, eos), question
        answers.append(tokenizer.decode(mine, skip_special_tokens=True))
    assert "Paris" in answers[0]


def test_chat_prompt_is_37_tokens(tokenizer) -> None:
    assert len(chat_ids(tokenizer, PROMPTS[0])) == 37


def test_greedy_answers_match_transformers(ours: LoadedModel, tokenizer) -> None:
    from transformers import AutoModelForCausalLM

    reference = AutoModelForCausalLM.from_pretrained(ours.source.folder, dtype=torch.float32).eval()
    check_same_answers(ours, tokenizer, reference)


@pytest.mark.slow
def test_greedy_answers_match_transformers_loading_the_gguf(ours: LoadedModel, tokenizer) -> None:
    from transformers import AutoModelForCausalLM

    gguf = ours.source.origin
    reference = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32).eval()
    check_same_answers(ours, tokenizer, reference)
