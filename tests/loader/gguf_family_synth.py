"""Mixtral, Phi-3, Gemma 2 and Gemma 3 GGUFs written the way llama.cpp's converter writes them.

`write_family_gguf(path, arch, model)` takes a transformers model and writes what
convert_hf_to_gguf.py would, as read there (and gguf-py's tensor names, `tensor_mapping.py`):

- `llama` (Mixtral, `LlamaModel`): Q/K rows permuted for llama.cpp's rotary; stacked experts
  `ffn_{gate,up,down}_exps` `[E, out, in]`, the router `ffn_gate_inp`, `expert_count` and
  `expert_used_count`.
- `phi3` (`Phi3MiniModel`): fused `attn_qkv` and `ffn_up` (gate rows then up rows), no Q/K
  permutation, `rope.dimension_count` rotary dims, the original context, `sliding_window` (0 for
  none), and with long-rope the factor tensors `rope_factors_long/short.weight` and the attention
  factor `sqrt(1 + ln(scale) / ln(original))`.
- `gemma2` / `gemma3` (`Gemma2Model`, `Gemma3Model`): every `*norm.weight` stored plus one, no
  `lm_head`, key/value lengths; Gemma 2 its soft-caps and window, no rotary base; Gemma 3 the
  global rotary base and scaling, the window, the final soft-cap only if set.
- `deepseek2` (DeepSeek V2 and V3, `DeepseekV2Model` and `TextModel.set_gguf_parameters`): MLA
  written as MQA (one KV head, `key_length` = kv_lora + rope, `value_length` = kv_lora, the real
  dims in `key_length_mla` / `value_length_mla`), `kv_b_proj` split per head into `attn_k_b`
  (transposed) and `attn_v_b`, the expert and group counts, the gating function, shared experts,
  leading dense blocks, the routed scale, the norm only when true, yarn with
  `yarn_log_multiplier` = 0.1 * mscale_all_dim. `legacy_mla`: as converters before llama.cpp's
  MLA split wrote it (real KV heads and head dims, one `attn_kv_b`, no `*_mla`, group or gating keys).
- `glm4moe` (`Glm4MoeModel`): the DeepSeek MoE keys and names, `post_attention_layernorm` as
  `post_attention_norm`, sigmoid gating, partial rotary as `rope.dimension_count`, and the
  multi-token-prediction layer after the transformer layers (`block_count` counts it,
  `nextn_predict_layers` says how many): here the last layer's tensors again plus random
  `nextn.*` ones, which the loader must skip.

Every tensor is F32, with the byte-level BPE vocabulary of `gguf_synth` (real Gemma and Phi-3
files carry SentencePiece vocabularies; the tokenizer is not what these files test).
"""

from __future__ import annotations

import math
from pathlib import Path

import gguf
import torch

from .gguf_deepseek_synth import (
    DEEPSEEK_NAMES,
    GLM4MOE_NAMES,
    mtp_layer,
    split_kv_b,
    write_deepseek_keys,
    write_glm4moe_keys,
)
from .gguf_synth import HF_BLOCK_NAMES, add_vocabulary, llama_cpp_permute, write_tensors_and_close

Q8_0 = gguf.GGMLQuantizationType.Q8_0
_COMMON = {hf: ggml for hf, ggml in HF_BLOCK_NAMES.items() if hf != "post_attention_layernorm"}
"""The names every family shares (Gemma's and GLM's post-attention norms differ from llama's)."""
_BLOCK_NAMES = {
    "deepseek2": {**_COMMON, **DEEPSEEK_NAMES},
    "glm4moe": {**_COMMON, **GLM4MOE_NAMES},
    "llama": {**_COMMON, "post_attention_layernorm": "ffn_norm", "mlp.gate": "ffn_gate_inp"},
    "phi3": {
        **_COMMON,
        "self_attn.qkv_proj": "attn_qkv",
        "mlp.gate_up_proj": "ffn_up",
        "post_attention_layernorm": "ffn_norm",
    },
    "gemma": {
        **_COMMON,
        "post_attention_layernorm": "post_attention_norm",
        "pre_feedforward_layernorm": "ffn_norm",
        "post_feedforward_layernorm": "post_ffw_norm",
    },
}


def _tensors(arch: str, model: torch.nn.Module, legacy_mla: bool = False) -> dict[str, torch.Tensor]:
    config = model.config
    state = {name: t.detach().float() for name, t in model.state_dict().items()}
    names = _BLOCK_NAMES["gemma" if arch.startswith("gemma") else arch]
    out = {"token_embd.weight": state["model.embed_tokens.weight"], "output_norm.weight": state["model.norm.weight"]}
    if not config.tie_word_embeddings and not arch.startswith("gemma"):
        out["output.weight"] = state["lm_head.weight"]
    for i in range(config.num_hidden_layers):
        prefix = f"model.layers.{i}."
        for name, tensor in state.items():
            if not name.startswith(prefix):
                continue
            module, _, kind = name[len(prefix) :].rpartition(".")
            if module == "mlp.experts":  # transformers' stacked experts: gate_up [E, 2I, H], down [E, H, I]
                width = tensor.shape[1] // 2
                if kind == "gate_up_proj":
                    out[f"blk.{i}.ffn_gate_exps.weight"] = tensor[:, :width]
                    out[f"blk.{i}.ffn_up_exps.weight"] = tensor[:, width:]
                else:
                    out[f"blk.{i}.ffn_down_exps.weight"] = tensor
                continue
            if arch == "llama" and module in ("self_attn.q_proj", "self_attn.k_proj"):
                heads = config.num_attention_heads if module == "self_attn.q_proj" else config.num_key_value_heads
                tensor = llama_cpp_permute(tensor, heads)
            if kind == "e_score_correction_bias":  # gguf-py maps `mlp.gate.e_score_correction` + `.bias`
                out[f"blk.{i}.exp_probs_b.bias"] = tensor
                continue
            if module == "self_attn.kv_b_proj" and not legacy_mla:
                out[f"blk.{i}.attn_k_b.weight"], out[f"blk.{i}.attn_v_b.weight"] = split_kv_b(tensor, config)
                continue
            out[f"blk.{i}.{names[module]}.{kind}"] = tensor
    if arch.startswith("gemma"):
        out = {name: t + 1 if name.endswith("norm.weight") else t for name, t in out.items()}
    if arch == "glm4moe":
        out |= mtp_layer(out, config)
    return out


def _write_keys(w: gguf.GGUFWriter, arch: str, model: torch.nn.Module, legacy_mla: bool) -> dict[str, torch.Tensor]:
    """The converter's metadata for `arch`; returns the extra tensors it generates (Phi-3's factors)."""
    c = model.config
    rope = c.rope_parameters
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    # GLM-4-MoE's block count includes its multi-token-prediction layers.
    w.add_block_count(c.num_hidden_layers + (c.num_nextn_predict_layers if arch == "glm4moe" else 0))
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    # deepseek2 MLA is written as MQA: one KV head.
    w.add_head_count_kv(1 if arch == "deepseek2" and not legacy_mla else c.num_key_value_heads)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    if arch == "deepseek2":
        write_deepseek_keys(w, c, legacy_mla)
        return {}
    if arch == "glm4moe":
        write_glm4moe_keys(w, c)
        return {}
    if arch == "llama":
        w.add_rope_freq_base(rope["rope_theta"])
        w.add_rope_dimension_count(getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads)
        w.add_expert_count(c.num_local_experts)
        w.add_expert_used_count(c.num_experts_per_tok)
        return {}
    if arch == "phi3":
        rope_dims = int(rope.get("partial_rotary_factor", 1.0) * c.hidden_size) // c.num_attention_heads
        original = rope["original_max_position_embeddings"]
        w.add_rope_scaling_orig_ctx_len(original)
        w.add_rope_dimension_count(rope_dims)
        w.add_rope_freq_base(rope["rope_theta"])
        w.add_sliding_window(c.sliding_window or 0)
        scale = c.max_position_embeddings / original
        w.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(scale) / math.log(original)) if scale > 1 else 1.0)
        return {
            "rope_factors_long.weight": torch.tensor(rope["long_factor"]),
            "rope_factors_short.weight": torch.tensor(rope["short_factor"]),
        }
    w.add_key_length(c.head_dim)
    w.add_value_length(c.head_dim)
    w.add_sliding_window(c.sliding_window)
    if arch == "gemma2":
        w.add_attn_logit_softcapping(c.attn_logit_softcapping)
        w.add_final_logit_softcapping(c.final_logit_softcapping)
        return {}
    full = rope["full_attention"]
    w.add_rope_freq_base(full["rope_theta"])
    if full.get("rope_type") == "linear":
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(full["factor"])
    if c.final_logit_softcapping:
        w.add_final_logit_softcapping(c.final_logit_softcapping)
    return {}


def _split_experts(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Early Mixtral GGUFs' layout: `blk.N.ffn_gate.E.weight` per expert instead of `ffn_gate_exps`."""
    out = {}
    for name, tensor in tensors.items():
        if name.startswith("blk.") and name.endswith("_exps.weight"):
            _, layer, kind, _ = name.split(".")
            out |= {f"blk.{layer}.{kind.removesuffix('_exps')}.{e}.weight": t for e, t in enumerate(tensor)}
        else:
            out[name] = tensor
    return out


def write_family_gguf(
    path: Path,
    arch: str,
    model: torch.nn.Module,
    q8_0: tuple[str, ...] = (),
    split_experts: bool = False,
    legacy_mla: bool = False,
) -> None:
    """Write `model` (a transformers Mixtral, Phi-3, Gemma 2, Gemma 3 or DeepSeek V2/V3) as a GGUF
    of `arch`; block tensors named `blk.N.<one of q8_0>.weight` are stored as Q8_0, the rest as
    F32; `split_experts`: one tensor per expert, as early Mixtral files have them; `legacy_mla`:
    DeepSeek as converters before the MLA split wrote it."""
    w = gguf.GGUFWriter(path, arch=arch)
    extra = _write_keys(w, arch, model, legacy_mla)
    add_vocabulary(w, "smollm")
    tensors = _tensors(arch, model, legacy_mla)
    write_tensors_and_close(
        w,
        {**(_split_experts(tensors) if split_experts else tensors), **extra},
        lambda name: (
            Q8_0 if name.startswith("blk.") and name.split(".")[2] in q8_0 and name.endswith(".weight") else None
        ),
    )


SPM_PIECES = (
    ["<pad>", "<eos>", "<bos>", "<unk>"]
    + [f"<0x{b:02X}>" for b in range(256)]
    + ["▁", "h", "e", "l", "o", "w", "r", "d", "▁h", "ll", "he", "▁he", "llo", "▁hello", "▁w", "or", "▁wor", "ld"]
    + ["▁world"]
)
"""A tiny SentencePiece vocabulary: specials, the 256 byte-fallback pieces, then pieces best first."""


def add_sentencepiece_vocabulary(w: gguf.GGUFWriter) -> None:
    """`SPM_PIECES` with the keys `_set_vocab_sentencepiece` writes (tokenizer model `llama`,
    scores, llama.cpp token types: control 3, unknown 2, byte 6, normal 1)."""
    normal = len(SPM_PIECES) - 260
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(SPM_PIECES)
    w.add_token_scores([0.0] * 260 + [-float(i) for i in range(normal)])
    w.add_token_types([3, 3, 3, 2] + [6] * 256 + [1] * normal)
    w.add_pad_token_id(0)
    w.add_eos_token_id(1)
    w.add_bos_token_id(2)
    w.add_unk_token_id(3)
    w.add_add_bos_token(True)
    w.add_add_space_prefix(False)
