"""GGUF conversion on tiny synthetic files: config extraction, names, Q/K un-permutation, errors.

The files are written as llama.cpp's converter writes them (see gguf_synth), from a known Hugging
Face state dict, so "loaded weights equal the state dict" checks the whole path exactly.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest
import torch

from sglang.runtime.loader import CorruptCheckpointError, UnsupportedModelError, open_model_source
from sglang.runtime.loader.gguf_tensors import unpermute_qk

from .gguf_synth import Shape, random_state_dict, write_gguf

SHAPES = {
    "llama-tied": Shape(),
    "llama-untied": Shape(tied=False, kv_heads=4),
    "qwen2": Shape(arch="qwen2", pre="qwen2"),
    "qwen3": Shape(arch="qwen3", head_dim=32, pre="qwen2"),
}


@pytest.mark.parametrize("key", SHAPES)
def test_round_trip_recovers_hf_state_dict(key: str, tmp_path: Path) -> None:
    shape = SHAPES[key]
    state = random_state_dict(shape)
    write_gguf(tmp_path / "m.gguf", shape, state)
    source = open_model_source(tmp_path / "m.gguf", "auto", cache_dir=tmp_path / "cache")
    loaded = dict(source.weights())
    assert loaded.keys() == state.keys()
    for name, tensor in state.items():
        assert torch.equal(loaded[name], tensor), name
    config = source.config
    assert config["architectures"] == [
        {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}[shape.arch]
    ]
    assert (config["hidden_size"], config["num_hidden_layers"], config["head_dim"]) == (
        shape.hidden,
        shape.layers,
        shape.head_dim,
    )
    assert (config["num_attention_heads"], config["num_key_value_heads"]) == (shape.heads, shape.kv_heads)
    assert config["tie_word_embeddings"] is shape.tied and config["attention_bias"] is (shape.arch == "qwen2")
    assert config["vocab_size"] == shape.vocab and config["rms_norm_eps"] == 1e-6 and "torch_dtype" not in config
    assert source.dtype == torch.float32


def test_unpermute_inverts_llama_cpp_permute() -> None:
    from .gguf_synth import llama_cpp_permute

    w = torch.arange(4 * 16 * 3, dtype=torch.float32).reshape(64, 3)
    assert torch.equal(unpermute_qk(llama_cpp_permute(w, 4), 4), w)
    bias = torch.arange(64, dtype=torch.float32)
    assert torch.equal(unpermute_qk(llama_cpp_permute(bias, 4), 4), bias)


def test_unsupported_architecture(tmp_path: Path) -> None:
    w = gguf.GGUFWriter(tmp_path / "m.gguf", arch="falcon")
    w.add_tensor("token_embd.weight", np.zeros((4, 4), dtype=np.float32))
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    with pytest.raises(UnsupportedModelError, match="'falcon' is not supported"):
        open_model_source(tmp_path / "m.gguf", "float32", cache_dir=tmp_path / "cache")
    assert not list((tmp_path / "cache").iterdir()), "a failed conversion must leave nothing behind"


def test_unknown_tensor_is_named(tmp_path: Path) -> None:
    shape = Shape(layers=1)
    state = random_state_dict(shape)
    write_gguf(tmp_path / "m.gguf", shape, state)
    # Rewrite with one extra tensor that has no Hugging Face equivalent.
    reader = gguf.GGUFReader(tmp_path / "m.gguf")
    w = gguf.GGUFWriter(tmp_path / "x.gguf", arch="llama")
    for field in reader.fields.values():
        if not field.name.startswith(("GGUF.", "general.architecture")):
            w.add_key_value(
                field.name, field.contents(), field.types[0], field.types[-1] if len(field.types) > 1 else None
            )
    for t in reader.tensors:
        w.add_tensor(t.name, np.array(t.data))
    w.add_tensor("blk.0.ffn_gate_shexp.weight", np.zeros((2, 4), dtype=np.float32))
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    with pytest.raises(UnsupportedModelError, match=r"'blk\.0\.ffn_gate_shexp\.weight'"):
        open_model_source(tmp_path / "x.gguf", "float32", cache_dir=tmp_path / "cache")


def test_truncated_gguf(tmp_path: Path) -> None:
    shape = Shape(layers=1)
    write_gguf(tmp_path / "m.gguf", shape, random_state_dict(shape))
    data = (tmp_path / "m.gguf").read_bytes()
    (tmp_path / "m.gguf").write_bytes(data[: len(data) // 2])
    with pytest.raises(CorruptCheckpointError, match=r"m\.gguf is truncated or corrupt"):
        open_model_source(tmp_path / "m.gguf", "float32", cache_dir=tmp_path / "cache")
