"""Tiny synthetic GGUF files for loader tests, written the way llama.cpp's converter writes them.

`write_gguf` takes a Hugging Face-layout state dict, applies llama.cpp's Q/K permutation for the
llama architecture (the formula of `LlamaModel.permute` in convert_hf_to_gguf.py, written out here
independently of the loader), and stores every tensor as F32 together with a small byte-level BPE
vocabulary. A loader that recovers the state dict exactly has undone the permutation correctly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np
import torch
from gguf.quants import quantize

# GPT-2's printable spelling of the 256 byte values (the alphabet of byte-level BPE vocabularies).
_BYTES = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
BYTE_ALPHABET = [chr(b) for b in _BYTES] + [chr(256 + n) for n in range(256 - len(_BYTES))]
MERGES = ["h e", "l l", "he ll", "Ġ w", "o r", "Ġw or", "1 2"]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TOKENS = SPECIALS + BYTE_ALPHABET + [m.replace(" ", "") for m in MERGES]

HF_BLOCK_NAMES = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm",
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


@dataclass(frozen=True)
class Shape:
    arch: str = "llama"
    layers: int = 2
    hidden: int = 64
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 16
    intermediate: int = 96
    tied: bool = True
    pre: str = "smollm"
    add_bos: bool = False

    @property
    def vocab(self) -> int:
        return len(TOKENS)


def llama_cpp_permute(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """convert_hf_to_gguf.py's `LlamaModel.permute`: HF rotate-half rows -> interleaved pairs."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def random_state_dict(shape: Shape, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    q_rows, kv_rows = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    per_layer = {
        "self_attn.q_proj.weight": (q_rows, shape.hidden),
        "self_attn.k_proj.weight": (kv_rows, shape.hidden),
        "self_attn.v_proj.weight": (kv_rows, shape.hidden),
        "self_attn.o_proj.weight": (shape.hidden, q_rows),
        "input_layernorm.weight": (shape.hidden,),
        "post_attention_layernorm.weight": (shape.hidden,),
        "mlp.gate_proj.weight": (shape.intermediate, shape.hidden),
        "mlp.up_proj.weight": (shape.intermediate, shape.hidden),
        "mlp.down_proj.weight": (shape.hidden, shape.intermediate),
    }
    if shape.arch == "qwen2":
        per_layer |= {
            "self_attn.q_proj.bias": (q_rows,),
            "self_attn.k_proj.bias": (kv_rows,),
            "self_attn.v_proj.bias": (kv_rows,),
        }
    if shape.arch == "qwen3":
        per_layer |= {"self_attn.q_norm.weight": (shape.head_dim,), "self_attn.k_norm.weight": (shape.head_dim,)}
    names = {"model.embed_tokens.weight": (shape.vocab, shape.hidden), "model.norm.weight": (shape.hidden,)}
    for i in range(shape.layers):
        names |= {f"model.layers.{i}.{k}": v for k, v in per_layer.items()}
    if not shape.tied:
        names["lm_head.weight"] = (shape.vocab, shape.hidden)
    return {name: torch.randn(dims, generator=g) for name, dims in names.items()}


def gguf_name(hf: str) -> str:
    fixed = {
        "model.embed_tokens.weight": "token_embd.weight",
        "model.norm.weight": "output_norm.weight",
        "lm_head.weight": "output.weight",
    }
    if hf in fixed:
        return fixed[hf]
    _, _, layer, rest = hf.split(".", 3)
    module, _, kind = rest.rpartition(".")
    return f"blk.{layer}.{HF_BLOCK_NAMES[module]}.{kind}"


def add_vocabulary(w: gguf.GGUFWriter, pre: str, add_bos: bool = False) -> None:
    """The byte-level BPE vocabulary `TOKENS` with llama.cpp's tokenizer keys."""
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(TOKENS)
    w.add_token_types([3] * len(SPECIALS) + [1] * (len(TOKENS) - len(SPECIALS)))
    w.add_token_merges(MERGES)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(add_bos)


def write_gguf(
    path: Path,
    shape: Shape,
    state: dict[str, torch.Tensor],
    chat_template: str | None = None,
    quantized_as: Callable[[str], gguf.GGMLQuantizationType | None] = lambda name: None,
) -> None:
    """`state` under GGUF names, float32 or quantized to the type `quantized_as(gguf_name)` gives."""
    w = gguf.GGUFWriter(path, arch=shape.arch)
    w.add_block_count(shape.layers)
    w.add_context_length(256)
    w.add_embedding_length(shape.hidden)
    w.add_feed_forward_length(shape.intermediate)
    w.add_head_count(shape.heads)
    w.add_head_count_kv(shape.kv_heads)
    w.add_key_length(shape.head_dim)
    w.add_value_length(shape.head_dim)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-6)
    add_vocabulary(w, shape.pre, shape.add_bos)
    if chat_template is not None:
        w.add_chat_template(chat_template)
    tensors = {}
    for name, tensor in state.items():
        if shape.arch == "llama" and name.endswith(("q_proj.weight", "k_proj.weight")):
            tensor = llama_cpp_permute(tensor, shape.heads if "q_proj" in name else shape.kv_heads)
        tensors[gguf_name(name)] = tensor
    write_tensors_and_close(w, tensors, quantized_as)


def write_tensors_and_close(
    w: gguf.GGUFWriter,
    tensors: dict[str, torch.Tensor],
    quantized_as: Callable[[str], gguf.GGMLQuantizationType | None] = lambda name: None,
) -> None:
    """Adds `tensors` (float32, or quantized to the type `quantized_as(name)` gives) after the
    keys already added, and writes the file."""
    for name, tensor in tensors.items():
        array = np.ascontiguousarray(tensor.numpy(), dtype=np.float32)
        if (kind := quantized_as(name)) is not None:
            w.add_tensor(name, quantize(array, kind), raw_dtype=kind)
        else:
            w.add_tensor(name, array)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
