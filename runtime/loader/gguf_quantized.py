"""A GGUF file's quantized tensors kept quantized: Q4_1 as int4 group 32, Q8_0 as int8 group 32.

Both maps are exact, block for block: a Q4_1 block (float16 `d`, float16 `m`, 16 bytes of
nibbles) is `w = d * q + m` with `q` in 0..15, which is `QuantizedWeight`'s int4 (scale `d`,
offset `m`, the same byte order); a Q8_0 block (float16 `d`, 32 int8) is `w = d * q`, its int8.
float16 scales widen to float32 exactly, so dequantizing the repacked weight gives the very
values the GGUF dequantizer gives. Other quantized types (K-quants, Q5, MXFP4, ...) and 3-D
tensors (stacked experts, DeepSeek's per-head `attn_k_b`/`attn_v_b`), whatever their type, are
not kept: they are served from the dequantized float32 copy, and a log line names the types.

The repacked tensors are cached next to the float32 conversion (`cache_root("gguf-quantized")`,
the same entry naming), as one safetensors file: `<name>.qdata`, `<name>.scales`,
`<name>.offsets`, with each tensor's format in the metadata. Q/K rows are un-permuted as the
float32 conversion does (the permutation moves whole rows, and rows quantize independently), and
fused tensors (Phi-3's `attn_qkv`, `ffn_up`) are split into their parts' rows the same way, under
the part names the model's fused layers are stacked from.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from sglang.ops.quant import QuantizedWeight, WeightFormat

from .cache import cache_root, entry_name, publish
from .errors import MissingFileError
from .gguf_config import architecture_info, gguf_to_hf_config
from .gguf_file import GGUFFile
from .gguf_tensors import _BLOCK, hf_name, is_converted, is_stacked_experts, unpermute_qk

logger = logging.getLogger(__name__)

FILE = "quantized.safetensors"
KEPT = {
    gguf.GGMLQuantizationType.Q4_1: WeightFormat(4, 32),
    gguf.GGMLQuantizationType.Q8_0: WeightFormat(8, 32),
}
DENSE_TYPES = {gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.BF16}


def repack(data: np.ndarray, kind: gguf.GGMLQuantizationType, rows: int, cols: int) -> QuantizedWeight:
    """One tensor's raw blocks (`rows x cols` values) as a `QuantizedWeight`, bit for bit."""
    fmt = KEPT[kind]
    block_bytes = 20 if fmt.bits == 4 else 34
    blocks = np.ascontiguousarray(data).view(np.uint8).reshape(rows, cols // 32, block_bytes)
    scales = blocks[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float32)
    if fmt.bits == 4:
        offsets = torch.from_numpy(blocks[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float32))
        qdata = torch.from_numpy(blocks[..., 4:].reshape(rows, cols // 2).copy())
    else:
        offsets = None
        qdata = torch.from_numpy(blocks[..., 2:].reshape(rows, cols).copy().view(np.int8))
    return QuantizedWeight(fmt, qdata, torch.from_numpy(scales), offsets)


def _permute_rows(weight: QuantizedWeight, n_heads: int) -> QuantizedWeight:
    order = unpermute_qk(torch.arange(weight.shape[0]), n_heads)
    return weight.rows(order)


def _unfused(hf: str, weight: QuantizedWeight, config: dict[str, Any]) -> list[tuple[str, QuantizedWeight]]:
    """A fused checkpoint tensor (Phi-3's `qkv_proj`, `gate_up_proj`) as its parts' rows, under
    the names the model's quantized layers look up; any other tensor as itself."""
    heads, kv_heads, head_dim = config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]
    fused = {
        "self_attn.qkv_proj": (
            ("q_proj", heads * head_dim),
            ("k_proj", kv_heads * head_dim),
            ("v_proj", kv_heads * head_dim),
        ),
        "mlp.gate_up_proj": (("gate_proj", config["intermediate_size"]), ("up_proj", config["intermediate_size"])),
    }
    parent, _, module = hf.removesuffix(".weight").rpartition(".")
    parent, _, group = parent.rpartition(".")
    parts = fused.get(f"{group}.{module}")
    if parts is None or not hf.endswith(".weight"):
        return [(hf, weight)]
    out, start = [], 0
    for part, rows in parts:
        out.append((f"{parent}.{group}.{part}.weight", weight.rows(slice(start, start + rows))))
        start += rows
    return out


def convert_quantized(gguf_path: Path, out_dir: Path) -> None:
    gf = GGUFFile.open(gguf_path)
    info, config = architecture_info(gf), gguf_to_hf_config(gf)
    heads = {"attn_q": config["num_attention_heads"], "attn_k": config["num_key_value_heads"]}
    tensors: dict[str, torch.Tensor] = {}
    formats: dict[str, str] = {}
    dequantized: Counter[str] = Counter()
    for name, t in gf.tensors.items():
        if not is_converted(gf, info, name):
            continue
        # Only matrices are Linear weights: not stacked experts, nor DeepSeek's per-head `attn_k_b`/`attn_v_b`.
        if t.tensor_type not in KEPT or is_stacked_experts(name) or len(t.shape) != 2:
            if t.tensor_type not in DENSE_TYPES:
                dequantized[t.tensor_type.name] += 1
            continue
        cols, rows = (int(d) for d in t.shape)
        weight = repack(t.data, t.tensor_type, rows, cols)
        block = _BLOCK.fullmatch(name)
        if info.permuted_qk and block and block[2] in heads:
            weight = _permute_rows(weight, heads[block[2]])
        for hf, part in _unfused(hf_name(name, info), weight, config):
            formats[hf] = part.format.name
            tensors[f"{hf}.qdata"], tensors[f"{hf}.scales"] = part.qdata.contiguous(), part.scales.contiguous()
            if part.offsets is not None:
                tensors[f"{hf}.offsets"] = part.offsets.contiguous()
    save_file(
        tensors,
        str(out_dir / FILE),
        metadata={"formats": json.dumps(formats), "dequantized": json.dumps(dict(dequantized))},
    )


def quantized_tensors(gguf_path: Path, root: Path | None = None) -> dict[str, QuantizedWeight]:
    """Hugging Face tensor name -> its exact quantized weight, for every Q4_1 and Q8_0 tensor."""
    if not gguf_path.is_file():
        raise MissingFileError(f"GGUF file {gguf_path} does not exist")
    folder = (root or cache_root("gguf-quantized")) / entry_name(gguf_path)
    if not folder.is_dir():
        logger.info("repacking the quantized tensors of %s once into %s", gguf_path.name, folder)
        publish(folder, lambda tmp: convert_quantized(gguf_path, tmp))
    weights: dict[str, QuantizedWeight] = {}
    with safe_open(str(folder / FILE), framework="pt") as f:
        meta, keys = f.metadata(), set(f.keys())
        for name, fmt in json.loads(meta["formats"]).items():
            offsets = f.get_tensor(f"{name}.offsets") if f"{name}.offsets" in keys else None
            weights[name] = QuantizedWeight(
                WeightFormat.parse(fmt), f.get_tensor(f"{name}.qdata"), f.get_tensor(f"{name}.scales"), offsets
            )
    dequantized = json.loads(meta["dequantized"])
    if dequantized:
        shown = ", ".join(f"{kind} ({n} tensors)" for kind, n in sorted(dequantized.items()))
        logger.info("%s: GGUF types kept only dequantized (float32): %s", gguf_path.name, shown)
    return weights
