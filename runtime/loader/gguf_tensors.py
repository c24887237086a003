"""GGUF tensors as Hugging Face tensors: names, shapes, dequantization and the Q/K un-permutation.

Names: llama.cpp's `blk.N.attn_q.weight` is Hugging Face's `model.layers.N.self_attn.q_proj.weight`,
and so on (`_BLOCK_NAMES`, `_GLOBAL_NAMES`, and an architecture's own `block_names`); a tensor
with no mapping fails with UnsupportedModelError naming it, rather than being dropped silently.
A name the architecture maps without a `.weight` (gpt-oss's `self_attn.sinks`) drops the suffix.

Experts: llama.cpp stacks them, `blk.N.ffn_{gate,up,down}_exps.{weight,bias}` `[E, out, in]`
and `[E, out]` (or `ffn_gate_up_exps`, gate rows then up rows); each becomes one tensor per
expert, `model.layers.N.mlp.experts.{e}.{gate,up,down}_proj.{weight,bias}`, the names
per-expert Hugging Face checkpoints use and every MoE layer here loads. Early Mixtral files
(llama.cpp's LLM_TENSOR_FFN_*_EXP) already store one tensor per expert, `blk.N.ffn_gate.E.weight`.

Multi-token-prediction layers (GLM-4-MoE's `nextn_predict_layers`) are not converted.

Architecture-specific: Gemma's converter stores every `*norm.weight` as `1 + w`
(`ArchitectureInfo.norm_offset`), undone here; tensors that hold config values (Phi-3's
`rope_factors_long/short`, `ArchitectureInfo.config_tensors`) are read by the config, not converted.

Shapes: GGUF lists dimensions innermost first; Hugging Face's shape is the reverse.

Q/K layout: for llama, llama.cpp's converter (`LlamaModel.permute` in convert_hf_to_gguf.py)
reorders the rows of each head of q_proj/k_proj from Hugging Face's rotate-half layout (first half
of the head = real parts, second half = imaginary parts) to interleaved pairs, for its GPT-J style
rotary kernel. `unpermute_qk` undoes that so the weights work with Hugging Face's rotary layout;
K uses the KV head count. Qwen2/Qwen3 files are not permuted.

Every tensor is dequantized to float32, which is exact for every GGUF block format (their values
are small integers times float16 scales plus float16 offsets), so the converted copy does not
depend on the dtype a run later asks for. MXFP4 tensors (gpt-oss's experts, most of its bytes)
are stored as bfloat16 instead, at half the size and as exactly: their values are E2M1 numbers
(two significant bits) times a power of two in float32's exponent range, all bfloat16 values.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import gguf
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
_EXPERTS = {
    "ffn_gate_exps": ("gate_proj",),
    "ffn_up_exps": ("up_proj",),
    "ffn_down_exps": ("down_proj",),
    "ffn_gate_up_exps": ("gate_proj", "up_proj"),
}
_STORED_DTYPES = {gguf.GGMLQuantizationType.MXFP4: torch.bfloat16}
"""GGUF types whose dequantized values are all exactly representable in a narrower dtype."""
_UNSUFFIXED = frozenset({"self_attn.sinks", "mlp.gate.e_score_correction_bias"})
"""Hugging Face parameters named without `.weight` (GGUF always adds it)."""
_BLOCK = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)")
_SPLIT_EXPERT = re.compile(r"blk\.(\d+)\.ffn_(gate|up|down)\.(\d+)\.weight")
"""Early Mixtral GGUFs' one tensor per expert (llama.cpp's LLM_TENSOR_FFN_*_EXP, `ffn_gate.%d`)."""
_GLOBAL = re.compile(r"(\w+)\.(weight|bias)")


_ANY_BLOCK = re.compile(r"blk\.(\d+)\.")


def is_converted(gf: GGUFFile, info: ArchitectureInfo, gguf_name: str) -> bool:
    """Whether the tensor becomes Hugging Face weights: not one holding config values (Phi-3's
    long-rope factors), nor one of the multi-token-prediction layers that GLM-4-MoE files keep
    past the transformer layers (`nextn_predict_layers` of `block_count`; llama.cpp's graph skips
    them, and plain decoding does not use them)."""
    if gguf_name in info.config_tensors:
        return False
    block = _ANY_BLOCK.match(gguf_name)
    mtp_layers = int(gf.arch_value("nextn_predict_layers", 0))
    return not (block and mtp_layers and int(block[1]) >= int(gf.require("block_count")) - mtp_layers)


def hf_name(gguf_name: str, info: ArchitectureInfo) -> str:
    """The Hugging Face checkpoint name of a non-expert GGUF tensor; raises UnsupportedModelError if unknown."""
    if m := _SPLIT_EXPERT.fullmatch(gguf_name):
        return f"model.layers.{m[1]}.mlp.experts.{m[3]}.{m[2]}_proj.weight"
    if m := _BLOCK.fullmatch(gguf_name):
        if m[2] in info.block_names:
            name = info.block_names[m[2]]
            return f"model.layers.{m[1]}.{name}" if name in _UNSUFFIXED else f"model.layers.{m[1]}.{name}.{m[3]}"
        if m[2] in _BLOCK_NAMES:
            return f"model.layers.{m[1]}.{_BLOCK_NAMES[m[2]]}.{m[3]}"
    if (m := _GLOBAL.fullmatch(gguf_name)) and m[1] in _GLOBAL_NAMES:
        return f"{_GLOBAL_NAMES[m[1]]}.{m[2]}"
    raise UnsupportedModelError(f"GGUF tensor {gguf_name!r} has no Hugging Face equivalent this loader knows")


def is_stacked_experts(gguf_name: str) -> bool:
    """Whether the tensor holds every expert of a layer (3-D weights, 2-D biases)."""
    return bool((m := _BLOCK.fullmatch(gguf_name)) and m[2] in _EXPERTS)


def hf_tensors(gguf_name: str, tensor: torch.Tensor, info: ArchitectureInfo) -> Iterator[tuple[str, torch.Tensor]]:
    """The Hugging Face tensors of one GGUF tensor: itself renamed, or one per expert (and part)."""
    block = _BLOCK.fullmatch(gguf_name)
    if block is None or block[2] not in _EXPERTS:
        yield hf_name(gguf_name, info), tensor
        return
    parts = _EXPERTS[block[2]]
    for expert, stacked in enumerate(tensor):
        for part, piece in zip(parts, stacked.chunk(len(parts)), strict=True):
            yield f"model.layers.{block[1]}.mlp.experts.{expert}.{part}.{block[3]}", piece


def joined_kv_b(k_b: torch.Tensor, v_b: torch.Tensor) -> torch.Tensor:
    """DeepSeek's `kv_b_proj` [H * (nope + v), kv_lora] from its two GGUF halves.

    Newer llama.cpp converters (`DeepseekV2Model.modify_tensors`, for MLA weight absorption) view
    it as [H, nope + v, kv_lora], split each head's rows into nope and v, and store
    `attn_k_b` = the nope rows transposed per head, [H, kv_lora, nope], and `attn_v_b` = the v
    rows, [H, v, kv_lora]. This undoes that, exactly (only rows move).
    """
    return torch.cat([k_b.transpose(1, 2), v_b], dim=1).flatten(0, 1)


_KV_B_HALVES = ("attn_k_b", "attn_v_b")


def _hf_tensors_of_file(
    name: str, tensor: torch.Tensor, info: ArchitectureInfo, load: Callable[[str], torch.Tensor]
) -> Iterator[tuple[str, torch.Tensor]]:
    """`hf_tensors`, with DeepSeek's `attn_k_b` joined to its `attn_v_b` (read through `load`),
    which then yields nothing itself."""
    block = _BLOCK.fullmatch(name)
    if block and block[2] in _KV_B_HALVES:
        if block[2] == "attn_k_b":
            v_b = load(f"blk.{block[1]}.attn_v_b.{block[3]}")
            yield f"model.layers.{block[1]}.self_attn.kv_b_proj.{block[3]}", joined_kv_b(tensor, v_b)
        return
    yield from hf_tensors(name, tensor, info)


def unpermute_qk(weight: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Invert llama.cpp's `permute(w, n_heads)`: per head, interleaved row pairs back to two halves.

    Works on the row dimension only, so it applies equally to a weight (rows, cols) and a bias (rows,).
    """
    rows = weight.shape[0]
    if rows % (2 * n_heads):
        raise UnsupportedModelError(f"cannot un-permute {rows} rows into {n_heads} heads of even size")
    return weight.reshape(n_heads, rows // n_heads // 2, 2, *weight.shape[1:]).transpose(1, 2).reshape(weight.shape)


def tensor_specs(gf: GGUFFile, info: ArchitectureInfo) -> list[TensorSpec]:
    """Name, stored dtype and shape of every converted tensor, in file order, without reading data."""

    def meta(name: str) -> torch.Tensor:
        return torch.empty(tuple(int(d) for d in reversed(gf.tensors[name].shape)), device="meta")

    specs = []
    for name, t in gf.tensors.items():
        if not is_converted(gf, info, name):
            continue
        dtype = _STORED_DTYPES.get(t.tensor_type, torch.float32)
        pieces = _hf_tensors_of_file(name, meta(name), info, meta)
        specs += [TensorSpec(hf, dtype, tuple(piece.shape)) for hf, piece in pieces]
    return specs


def _dequantized(gf: GGUFFile, name: str) -> torch.Tensor:
    t = gf.tensors[name]
    array = dequantize(t.data, t.tensor_type)
    if not array.flags.writeable:  # unquantized tensors come back as read-only views of the mmap
        array = array.copy()
    shape = tuple(int(d) for d in reversed(t.shape))
    return torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32)).reshape(shape)


def iter_hf_tensors(gf: GGUFFile, info: ArchitectureInfo, config: dict[str, Any]) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield `(hf_name, tensor)` for every tensor of `gf` as `tensor_specs` lists them, dequantized and un-permuted."""
    heads = {"attn_q": config["num_attention_heads"], "attn_k": config["num_key_value_heads"]}
    for name, t in gf.tensors.items():
        if not is_converted(gf, info, name):
            continue
        tensor = _dequantized(gf, name)
        block = _BLOCK.fullmatch(name)
        if info.permuted_qk and block and block[2] in heads:
            tensor = unpermute_qk(tensor, heads[block[2]])
        if info.norm_offset and name.endswith("norm.weight"):
            # Exact where the stored value is at least 0.5 (the difference is then a multiple of its
            # ulp), so the model's `1 + w` gives back the stored float32 bit for bit; below 0.5,
            # within one ulp.
            tensor = tensor - info.norm_offset
        dtype = _STORED_DTYPES.get(t.tensor_type, torch.float32)
        for hf, piece in _hf_tensors_of_file(name, tensor, info, lambda half: _dequantized(gf, half)):
            yield hf, piece.to(dtype).contiguous()
