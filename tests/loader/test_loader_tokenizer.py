"""Tokenizers built from GGUF metadata: the embedded model's chat prompt, special tokens, digits,
and agreement with transformers' own GGUF tokenizer conversion."""

from __future__ import annotations

from pathlib import Path

import pytest
import regex
from tokenizers import pre_tokenizers

from sglang.runtime.loader import ModelSource, open_model_source
from sglang.runtime.loader.gguf_file import GGUFFile
from sglang.runtime.loader.tokenizer import DEEPSEEK3_SPLITS, build_gguf_tokenizer, can_build_fast

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


def _pieces_as_llama_cpp_splits(text: str, regexes: tuple[str, ...]) -> list[str]:
    """llama.cpp's `unicode_regex_split`, written out: each regex splits every piece the one before
    left into its matches and the text between them, nothing dropped."""
    pieces = [text]
    for pattern in regexes:
        split = []
        for piece in pieces:
            cursor = 0
            for match in regex.finditer(pattern, piece):
                split += [p for p in (piece[cursor : match.start()], match.group()) if p]
                cursor = match.end()
            split += [piece[cursor:]] if cursor < len(piece) else []
        pieces = split
    return pieces


def test_deepseek_v3_pre_tokenizer_splits_as_llama_cpp(tmp_path: Path) -> None:
    shape = Shape(layers=1, pre="deepseek-v3")
    write_gguf(tmp_path / "m.gguf", shape, random_state_dict(shape))
    metadata = GGUFFile.open(tmp_path / "m.gguf").metadata
    assert can_build_fast(metadata)
    pre_tokenizer = build_gguf_tokenizer(metadata).backend_tokenizer.pre_tokenizer
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    for text in [*SAMPLES, "x=[a\\b]; 1234567 ひらがなカタカナ漢字 .Net_v2 \r\n\r\n  end"]:
        want = [byte_level.pre_tokenize_str(p)[0][0] for p in _pieces_as_llama_cpp_splits(text, DEEPSEEK3_SPLITS)]
        assert [p for p, _ in pre_tokenizer.pre_tokenize_str(text)] == want, text


def test_glm4_adds_no_bos_even_when_the_file_asks(tmp_path: Path) -> None:
    """llama.cpp's CHATGLM4 pre-tokenizer clears the BOS token: nothing is added around text."""
    for pre, bos_first in (("glm4", False), ("llama-bpe", True)):
        shape = Shape(layers=1, pre=pre, add_bos=True)
        write_gguf(tmp_path / f"{pre}.gguf", shape, random_state_dict(shape))
        tokenizer = build_gguf_tokenizer(GGUFFile.open(tmp_path / f"{pre}.gguf").metadata)
        assert (tokenizer("hello")["input_ids"][0] == 1) == bos_first, pre
