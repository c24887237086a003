"""GGUF tensors as Hugging Face tensors: names, shapes, dequantization and the Q/K un-permutation.

Names: llama.cpp's `blk.N.attn_q.weight` is Hugging Face's `model.layers.N.self_attn.q_proj.weight`,
and so on (`_BLOCK_NAMES`, `_GLOBAL_NAMES`); a tensor with no mapping fails with
UnsupportedModelError naming it, rather than being dropped silently.

Shapes: GGUF lists dimensions innermost first; Hugging Face's shape is the reverse.

Q/K layout: for llama, llama.cpp's converter (`LlamaModel.permute` in convert_hf_to_gguf.py)
reorders the rows of each head of q_proj/k_proj from Hugging Face's rotate-half layout (first half
of the head = real parts, second half = imaginary parts) to interleaved pairs, for its GPT-J style
rotary kernel. `unpermute_qk` undoes that so the weights work with Hugging Face's rotary layout;
K uses the KV head count. Qwen2/Qwen3 files are not permuted.

Every tensor is dequantized to float32, which is exact for every GGUF block format (their values
are small integers times float16 scales plus float16 offsets), so the converted copy does not
depend on the dtype a run later asks for.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from gguf.quants import dequantize

from .errors import UnsupportedModelError
from .gguf_config import ArchitectureInfo
from .gguf_file import GGUFFile
from .safetensors_file import TensorSpec

_GLOBAL_NAMES = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
}
_BLOCK_NAMES = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_BLOCK = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)")
_GLOBAL = re.compile(r"(\w+)\.(weight|bias)")


def hf_name(gguf_name: str) -> str:
    """The Hugging Face checkpoint name of a GGUF tensor; raises UnsupportedModelError if unknown."""
    if (m := _BLOCK.fullmatch(gguf_name)) and m[2] in _BLOCK_NAMES:
        return f"model.layers.{m[1]}.{_BLOCK_NAMES[m[2]]}.{m[3]}"
    if (m := _GLOBAL.fullmatch(gguf_name)) and m[1] in _GLOBAL_NAMES:
        return f"{_GLOBAL_NAMES[m[1]]}.{m[2]}"
    raise UnsupportedModelError(f"GGUF tensor {gguf_name!r} has no Hugging Face equivalent this loader knows")


def unpermute_qk(weight: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Invert llama.cpp's `permute(w, n_heads)`: per head, interleaved row pairs back to two halves.

    Works on the row dimension only, so it applies equally to a weight (rows, cols) and a bias (rows,).
    """
    rows = weight.shape[0]
    if rows % (2 * n_heads):
        raise UnsupportedModelError(f"cannot un-permute {rows} rows into {n_heads} heads of even size")
    return weight.reshape(n_heads, rows // n_heads // 2, 2, *weight.shape[1:]).transpose(1, 2).reshape(weight.shape)


def tensor_specs(gf: GGUFFile) -> list[TensorSpec]:
    """Name, dtype (float32) and shape of every converted tensor, in file order, without reading data."""
    return [
        TensorSpec(hf_name(name), torch.float32, tuple(int(d) for d in reversed(t.shape)))
        for name, t in gf.tensors.items()
    ]


def iter_hf_tensors(gf: GGUFFile, info: ArchitectureInfo, config: dict[str, Any]) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield `(hf_name, float32 tensor)` for every tensor of `gf`, in file order, dequantized and un-permuted."""
    heads = {"attn_q": config["num_attention_heads"], "attn_k": config["num_key_value_heads"]}
    for name, t in gf.tensors.items():
        array = dequantize(t.data, t.tensor_type)
        if not array.flags.writeable:  # unquantized tensors come back as read-only views of the mmap
            array = array.copy()
        shape = tuple(int(d) for d in reversed(t.shape))
        tensor = torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32)).reshape(shape)
        block = _BLOCK.fullmatch(name)
        if info.permuted_qk and block and block[2] in heads:
            tensor = unpermute_qk(tensor, heads[block[2]])
        yield hf_name(name), tensor
