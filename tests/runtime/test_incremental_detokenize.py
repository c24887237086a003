"""Incremental detokenization gives, at every update, the text a whole decode would give.

The detokenizer decodes only the ids after its last committed text (with the ids before them as
context); these tests stream outputs through it one id and a few ids at a time and compare each
update with `held_back(decode(all ids so far))`, for a byte-level BPE tokenizer (the embedded
model's: multi-byte characters span several ids) and a SentencePiece-style one (its decoder drops
the leading space of a decode's first token: the context ids must keep it).
"""

from __future__ import annotations

import random
from itertools import pairwise
from typing import Any

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from sglang.runtime.loader import EmbeddedModelMissingError, embedded_model_path
from sglang.runtime.loader.gguf_source import cached_folder
from sglang.runtime.loader.tokenizer import load_tokenizer
from sglang.runtime.processes.detokenizer import Detokenizer, decodes_directly, held_back, text_decoder
from sglang.runtime.processes.messages import DecodeSpec, TokenBatch, TokenUpdate
from sglang.runtime.requests.finish_reason import FinishReason

TEXT = "Grüße aus Köln: 東京は晴れ 🌤️, naïve café — x² + y² = z²! Ça va? 👩‍💻 done."
STOP = "z²!"


def metaspace_tokenizer() -> PreTrainedTokenizerFast:
    backend = Tokenizer(models.BPE(unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Metaspace()
    backend.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "</s>"], show_progress=False)
    backend.train_from_iterator([TEXT, TEXT.lower(), "aus aus Köln Köln café"], trainer)
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", eos_token="</s>")


@pytest.fixture(scope="module", params=["byte-level", "metaspace"])
def tokenizer(request: pytest.FixtureRequest) -> Any:
    if request.param == "metaspace":
        return metaspace_tokenizer()
    try:
        return load_tokenizer(cached_folder(embedded_model_path()))
    except EmbeddedModelMissingError as exc:
        pytest.skip(str(exc))


def spec(stops: tuple[str, ...] = ()) -> DecodeSpec:
    return DecodeSpec(skip_special_tokens=True, spaces_between_special_tokens=True, stop_strings=stops, trim_stop=True)


@pytest.mark.parametrize("chunk", [1, 3])
def test_every_update_equals_a_whole_decode(tokenizer: Any, chunk: int) -> None:
    ids = tokenizer.encode(TEXT, add_special_tokens=False)
    detokenizer = Detokenizer(tokenizer)
    for end in range(chunk, len(ids) + chunk, chunk):
        new = ids[end - chunk : end]
        finish = FinishReason.of_length(len(ids)) if end >= len(ids) else None
        update = TokenUpdate("r", new, finish, decode_spec=spec() if end == chunk else None)
        (out,) = detokenizer.process(TokenBatch([update])).updates
        whole = tokenizer.decode(ids[:end], skip_special_tokens=True)
        assert out.text == (whole if finish else held_back(whole, ()))
    assert out.text == tokenizer.decode(ids, skip_special_tokens=True)
    assert detokenizer.streams == {}


def test_a_stop_string_cuts_the_incremental_text(tokenizer: Any) -> None:
    """Streamed text only grows, and holds back a stop string's start until the finish cuts it."""
    ids = tokenizer.encode(TEXT[: TEXT.index(STOP) + len(STOP)], add_special_tokens=False)
    detokenizer = Detokenizer(tokenizer)
    texts = []
    for end in range(1, len(ids) + 1):
        finish = FinishReason.stop(STOP) if end == len(ids) else None
        update = TokenUpdate("r", ids[end - 1 : end], finish, decode_spec=spec((STOP,)) if end == 1 else None)
        texts.append(detokenizer.process(TokenBatch([update])).updates[0].text)
    whole = tokenizer.decode(ids, skip_special_tokens=True)
    assert texts[-1] == whole[: whole.index(STOP)]
    assert all(later.startswith(earlier) for earlier, later in pairwise(texts))


@pytest.mark.parametrize("clean_up", [False, True])
def test_the_direct_decoder_gives_the_tokenizers_text(tokenizer: Any, clean_up: bool) -> None:
    """`text_decoder` may skip transformers' decode wrapper only where that changes nothing: for
    any ids, special tokens among them, skipped or kept, its text is `tokenizer.decode`'s. With
    `clean_up_tokenization_spaces` on, it goes through `decode` itself."""
    original = tokenizer.clean_up_tokenization_spaces
    tokenizer.clean_up_tokenization_spaces = clean_up
    try:
        assert decodes_directly(tokenizer) is (not clean_up)
        decode = text_decoder(tokenizer)
        rng = random.Random(0)
        ids = tokenizer.encode(TEXT + " Is it? ( yes ) , no .", add_special_tokens=False)
        specials = [tokenizer.convert_tokens_to_ids(t) for t in tokenizer.all_special_tokens]
        for _ in range(200):
            sample = [rng.choice(ids + specials) for _ in range(rng.randint(0, 12))]
            for skip in (False, True):
                for spaces in (False, True):
                    expected = tokenizer.decode(sample, skip_special_tokens=skip, spaces_between_special_tokens=spaces)
                    assert decode(sample, skip, spaces) == expected
    finally:
        tokenizer.clean_up_tokenization_spaces = original
