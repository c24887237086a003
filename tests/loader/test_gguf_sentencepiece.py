"""SentencePiece vocabularies in GGUF (Gemma, Phi-3): built through transformers' GGUF conversion,
or refused by name.

Our own GGUF tokenizer path builds byte-level BPE only; a `tokenizer.ggml.model == "llama"`
vocabulary goes to transformers, which applies each architecture's rules. These check that the
result tokenizes as llama.cpp's SentencePiece tokenizer would on a tiny vocabulary, and that a
vocabulary nothing handles fails naming what the file asked for.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from sglang.runtime.loader.errors import UnsupportedModelError
from sglang.runtime.loader.gguf_file import GGUFFile
from sglang.runtime.loader.tokenizer import load_tokenizer, save_gguf_tokenizer

from .gguf_family_synth import SPM_PIECES, add_sentencepiece_vocabulary


def _tokenizer_only_gguf(path: Path, arch: str, tokenizer_model: str | None = None) -> GGUFFile:
    w = gguf.GGUFWriter(path, arch=arch)
    add_sentencepiece_vocabulary(w)
    if tokenizer_model is not None:
        w.add_tokenizer_model(tokenizer_model)  # a later key of the same name replaces the first
    w.add_tensor("token_embd.weight", np.zeros((len(SPM_PIECES), 4), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return GGUFFile.open(path)


@pytest.mark.parametrize("arch", ["gemma2", "gemma3"])
def test_gemma_sentencepiece_vocabulary(arch: str, tmp_path: Path) -> None:
    """No prefix space (the converter's add_space_prefix False), merges by priority (`ll` before
    `he`, so "hello" is he + llo, not ▁hello), BOS added, unknown bytes through byte fallback."""
    gf = _tokenizer_only_gguf(tmp_path / "m.gguf", arch)
    save_gguf_tokenizer(gf.path, gf.metadata, tmp_path)
    tokenizer = load_tokenizer(tmp_path)
    ids = tokenizer("hello world").input_ids
    assert tokenizer.convert_ids_to_tokens(ids) == ["<bos>", "he", "llo", "▁world"]
    assert tokenizer.decode(ids, skip_special_tokens=True) == "hello world"
    # "é" is not a piece: its UTF-8 bytes C3 A9 are the byte pieces 4 + 0xC3 and 4 + 0xA9.
    assert tokenizer("é").input_ids == [2, 4 + 0xC3, 4 + 0xA9]


def test_an_unbuildable_vocabulary_is_refused_by_name(tmp_path: Path) -> None:
    gf = _tokenizer_only_gguf(tmp_path / "m.gguf", "gemma2", tokenizer_model="rwkv")
    with pytest.raises(UnsupportedModelError, match=r"cannot build its tokenizer.*'rwkv'"):
        save_gguf_tokenizer(gf.path, gf.metadata, tmp_path)
