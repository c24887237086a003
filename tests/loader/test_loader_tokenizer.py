"""Tokenizers built from GGUF metadata: the embedded model's chat prompt, special tokens, digits,
and agreement with transformers' own GGUF tokenizer conversion."""

from __future__ import annotations

from pathlib import Path

import pytest

from sglang.runtime.loader import ModelSource, open_model_source
from sglang.runtime.loader.gguf_file import GGUFFile
from sglang.runtime.loader.tokenizer import can_build_fast

from .gguf_synth import Shape, random_state_dict, write_gguf

MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]
# transformers 5.24's GGUF tokenizer on the chat-templated prompt (ChatML, default system prompt).
CHAT_PROMPT_IDS = [
    1,
    9690,
    198,
    2683,
    359,
    253,
    5356,
    5646,
    11173,
    3365,
    3511,
    308,
    34519,
    28,
    7018,
    411,
    407,
    19712,
    8182,
    2,
    198,
    1,
    4093,
    198,
    1780,
    314,
    260,
    3575,
    282,
    4649,
    47,
    2,
    198,
    1,
    520,
    9531,
    198,
]
SAMPLES = [
    "Hello world",
    "  leading spaces and\ttabs\n\nnew lines  ",
    "unicode: héllo wörld, 日本語, emoji 🤗",
    "<|im_start|>user\nhi<|im_end|>",
    "I'm, you're, they'll; don't!",
    "numbers 12 345 6789 and 3.14",
]


def test_embedded_chat_prompt(embedded_source: ModelSource, embedded_tokenizer) -> None:
    template = embedded_source.chat_template
    assert template is not None and "<|im_start|>" in template
    assert "You are a helpful AI assistant named SmolLM, trained by Hugging Face" in template
    text = embedded_tokenizer.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    ids = embedded_tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == 37 and ids == CHAT_PROMPT_IDS
    assert embedded_tokenizer.decode(ids) == text


def test_embedded_special_tokens(embedded_source: ModelSource, embedded_tokenizer, embedded_gguf: GGUFFile) -> None:
    assert can_build_fast(embedded_gguf.metadata)  # the fast builder, not transformers' conversion
    assert (embedded_tokenizer.eos_token, embedded_tokenizer.eos_token_id) == ("<|im_end|>", 2)
    assert (embedded_tokenizer.bos_token, embedded_tokenizer.bos_token_id) == ("<|im_start|>", 1)
    assert len(embedded_tokenizer) == 49152 == embedded_source.config["vocab_size"]
    # add_bos_token is false in the file: nothing is added around plain text.
    assert embedded_tokenizer("Hi")["input_ids"] == embedded_tokenizer("Hi", add_special_tokens=False)["input_ids"]


def test_embedded_digits_split_individually(embedded_tokenizer) -> None:
    # llama.cpp's "smollm" pre-tokenizer (and SmolLM2's own tokenizer.json) split every digit.
    assert embedded_tokenizer.tokenize("2024") == ["2", "0", "2", "4"]
    for text in SAMPLES:
        assert embedded_tokenizer.decode(embedded_tokenizer(text)["input_ids"]) == text


def _hf_gguf_tokenizer(path: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name, local_files_only=True)


@pytest.mark.parametrize("pre", ["qwen2", "llama-bpe", "gpt2", "smollm"])
def test_synthetic_matches_transformers(pre: str, tmp_path: Path) -> None:
    shape = Shape(layers=1, pre=pre)
    write_gguf(tmp_path / "m.gguf", shape, random_state_dict(shape), chat_template="{{ messages[0]['content'] }}")
    ours = open_model_source(tmp_path / "m.gguf", "float32", cache_dir=tmp_path / "cache")
    tokenizer, reference = ours.load_tokenizer(), _hf_gguf_tokenizer(tmp_path / "m.gguf")
    assert ours.chat_template == "{{ messages[0]['content'] }}"
    for text in [*SAMPLES, "hello world", "hell 12 1234"]:
        got = tokenizer(text, add_special_tokens=False)["input_ids"]
        want = reference(text, add_special_tokens=False)["input_ids"]
        if pre == "smollm" and any(c.isdigit() for c in text):
            # transformers ignores tokenizer.ggml.pre here and keeps "12" whole; llama.cpp splits digits.
            assert got != want and tokenizer.tokenize("12") == ["1", "2"]
        else:
            assert got == want, text


def test_add_bos_survives_the_cache(tmp_path: Path) -> None:
    """Llama-3-style files ask for BOS on every text; the saved and reloaded tokenizer must keep adding it."""
    shape = Shape(layers=1, pre="llama-bpe", add_bos=True)
    write_gguf(tmp_path / "m.gguf", shape, random_state_dict(shape))
    tokenizer = open_model_source(tmp_path / "m.gguf", "float32", cache_dir=tmp_path / "cache").load_tokenizer()
    reference = _hf_gguf_tokenizer(tmp_path / "m.gguf")
    ids = tokenizer("hello world")["input_ids"]
    assert ids[0] == 1 and ids[1:] == tokenizer("hello world", add_special_tokens=False)["input_ids"]
    assert ids == reference("hello world")["input_ids"]


@pytest.mark.slow
def test_embedded_matches_transformers(embedded_path: Path, embedded_tokenizer) -> None:
    reference = _hf_gguf_tokenizer(embedded_path)
    text = reference.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    assert embedded_tokenizer.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True) == text
    # SmolLM2's vocabulary has no multi-digit tokens, so digit splitting cannot change the ids here.
    for sample in [text, *SAMPLES]:
        assert (
            embedded_tokenizer(sample, add_special_tokens=False)["input_ids"]
            == reference(sample, add_special_tokens=False)["input_ids"]
        )
