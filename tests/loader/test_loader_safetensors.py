"""Hugging Face folders: reading safetensors (single and sharded) and failing clearly on bad checkpoints."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from sglang.runtime.loader import CorruptCheckpointError, MissingFileError, open_model_source
from sglang.runtime.loader.safetensors_file import TensorSpec, read_header, write_streaming

CONFIG = {"architectures": ["LlamaForCausalLM"], "hidden_size": 8, "torch_dtype": "bfloat16"}


def _tensors(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "model.embed_tokens.weight": torch.randn(16, 8, generator=g).to(torch.bfloat16),
        "model.layers.0.self_attn.q_proj.weight": torch.randn(8, 8, generator=g).to(torch.bfloat16),
        "model.norm.weight": torch.randn(8, generator=g).to(torch.bfloat16),
    }


def _folder(tmp_path: Path, shards: dict[str, dict[str, torch.Tensor]]) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    for name, tensors in shards.items():
        save_file(tensors, str(tmp_path / name))
    if len(shards) > 1:
        weight_map = {t: name for name, tensors in shards.items() for t in tensors}
        (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return tmp_path


def _sharded(tmp_path: Path) -> Path:
    t = _tensors()
    names = list(t)
    return _folder(
        tmp_path,
        {
            "model-00001-of-00002.safetensors": {n: t[n] for n in names[:2]},
            "model-00002-of-00002.safetensors": {n: t[n] for n in names[2:]},
        },
    )


def test_single_file_auto_dtype_and_cast(tmp_path: Path) -> None:
    folder = _folder(tmp_path, {"model.safetensors": _tensors()})
    source = open_model_source(folder, "auto", supported_dtypes={torch.float32, torch.bfloat16})
    assert source.dtype == torch.bfloat16 and source.num_tensors == 3
    fp32 = dict(open_model_source(folder, "float32").weights())
    assert all(t.dtype == torch.float32 for t in fp32.values())
    assert all(torch.equal(fp32[n], t.float()) for n, t in _tensors().items())


def test_sharded_yields_every_tensor_once(tmp_path: Path) -> None:
    source = open_model_source(_sharded(tmp_path), "bfloat16")
    names = [n for n, _ in source.weights()]
    assert sorted(names) == sorted(_tensors()) and source.num_tensors == 3


def test_truncated_file_names_file_and_tensor(tmp_path: Path) -> None:
    folder = _sharded(tmp_path)
    shard = folder / "model-00001-of-00002.safetensors"
    shard.write_bytes(shard.read_bytes()[:-10])
    # The shard holds the embedding and q_proj; whichever is stored last is the one cut short.
    expected = (
        r"model-00001-of-00002\.safetensors is truncated or corrupt: "
        r"tensor 'model\.(embed_tokens|layers\.0\.self_attn\.q_proj)\.weight' ends at"
    )
    with pytest.raises(CorruptCheckpointError, match=expected):
        open_model_source(folder, "float32")


def test_header_longer_than_file(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    path.write_bytes(struct.pack("<Q", 1000) + b"{}")
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    with pytest.raises(
        CorruptCheckpointError, match=r"model\.safetensors is truncated or corrupt: the header declares 1000"
    ):
        open_model_source(tmp_path, "float32")


def test_garbage_header(tmp_path: Path) -> None:
    path = tmp_path / "x.safetensors"
    path.write_bytes(struct.pack("<Q", 4) + b"nope")
    with pytest.raises(CorruptCheckpointError, match="not valid JSON"):
        read_header(path)


def test_missing_shard(tmp_path: Path) -> None:
    folder = _sharded(tmp_path)
    (folder / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(MissingFileError, match=r"model-00002-of-00002\.safetensors"):
        open_model_source(folder, "float32")


def test_index_names_tensor_not_in_shard(tmp_path: Path) -> None:
    folder = _sharded(tmp_path)
    index = folder / "model.safetensors.index.json"
    data = json.loads(index.read_text())
    data["weight_map"]["lm_head.weight"] = "model-00002-of-00002.safetensors"
    index.write_text(json.dumps(data))
    with pytest.raises(CorruptCheckpointError, match=r"model-00002-of-00002\.safetensors.*lm_head\.weight"):
        open_model_source(folder, "float32")


def test_missing_config_and_weights(tmp_path: Path) -> None:
    with pytest.raises(MissingFileError, match=r"config\.json"):
        open_model_source(tmp_path, "float32")
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    (tmp_path / "pytorch_model.bin").write_bytes(b"")
    with pytest.raises(MissingFileError, match=r"pytorch_model\.bin is not supported"):
        open_model_source(tmp_path, "float32")


def test_write_streaming_round_trip(tmp_path: Path) -> None:
    tensors = {n: t.float() for n, t in _tensors().items()}
    specs = [TensorSpec(n, t.dtype, tuple(t.shape)) for n, t in tensors.items()]
    write_streaming(tmp_path / "out.safetensors", specs, iter(tensors.items()), {"format": "pt"})
    loaded = load_file(str(tmp_path / "out.safetensors"))
    assert loaded.keys() == tensors.keys() and all(torch.equal(loaded[n], t) for n, t in tensors.items())
    with pytest.raises(ValueError, match="expected"):
        write_streaming(tmp_path / "bad.safetensors", specs, iter(reversed(tensors.items())))
