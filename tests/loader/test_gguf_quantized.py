"""The embedded GGUF's Q4_1 and Q8_0 tensors repacked as int4/int8 `QuantizedWeight`s, bit-exact.

Every kept tensor dequantizes to exactly the float32 conversion's tensor (gguf's own dequantizer,
Q/K rows un-permuted), element for element: the repacking loses nothing.
"""

from __future__ import annotations

import pytest
import torch

from sglang.runtime.loader.gguf_file import GGUFFile
from sglang.runtime.loader.gguf_quantized import quantized_tensors


@pytest.fixture(scope="module")
def kept(embedded_path, embedded_gguf, loader_cache):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(GGUFFile, "open", classmethod(lambda cls, path: embedded_gguf))
        return quantized_tensors(embedded_path, root=loader_cache / "quantized")


def test_every_q4_1_and_q8_0_tensor_is_kept(kept) -> None:
    formats = [w.format.name for w in kept.values()]
    assert formats.count("int4_g32") == 210  # every Q4_1 tensor of the file
    assert kept["model.embed_tokens.weight"].format.name == "int8_g32"  # its one Q8_0 tensor


def test_repacking_is_bit_exact(kept, embedded_weights) -> None:
    for name, weight in kept.items():
        assert torch.equal(weight.dequantize(), embedded_weights[name]), name


def test_cached_repacking_reloads_identically(kept, embedded_path, loader_cache) -> None:
    again = quantized_tensors(embedded_path, root=loader_cache / "quantized")  # from the cache: no GGUF parse
    name = "model.layers.3.self_attn.q_proj.weight"
    assert torch.equal(again[name].qdata, kept[name].qdata)
    assert torch.equal(again[name].offsets, kept[name].offsets)
