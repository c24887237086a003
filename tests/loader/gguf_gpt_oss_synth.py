"""A gpt-oss GGUF written the way llama.cpp's converter writes one, from a transformers model.

Layout (convert_hf_to_gguf.py's `GptOssModel`, gguf-py's tensor names for MODEL_ARCH.GPT_OSS):
transformers' stacked experts `gate_up_proj` `[E, H, 2I]` (gate and up interleaved) become
`blk.N.ffn_gate_exps.weight` and `ffn_up_exps.weight` `[E, I, H]`, `down_proj` `[E, I, H]` becomes
`ffn_down_exps.weight` `[E, H, I]`; these three are stored as MXFP4 (ggml's `block_mxfp4`: 32
values of a row, one E8M0 exponent byte and 16 bytes of E2M1 nibbles), everything else as F32.
The router is `ffn_gate_inp`, the sinks `attn_sinks.weight`, the MLP input norm
`post_attention_norm`. Metadata: the `gpt-oss.*` keys the converter writes (experts, window,
yarn with its betas), and no window pattern, so llama.cpp's default period of 2 applies.

`mxfp4_round_experts_` first rounds the model's expert weights to MXFP4 values in place, so the
file and the transformers model hold the same weights and their logits can be compared.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import torch
from gguf.quants import dequantize, quantize

from .gguf_synth import add_vocabulary, write_tensors_and_close

MXFP4 = gguf.GGMLQuantizationType.MXFP4
_NAMES = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "post_attention_norm",
    "mlp.router": "ffn_gate_inp",
}


def _ggml_experts(layer: str, state: dict[str, torch.Tensor], fused: bool) -> dict[str, torch.Tensor]:
    """One layer's experts in llama.cpp's layout (weights `[E, out, in]`, biases `[E, out]`);
    `fused`: the converter's `fuse_gate_up_exps`, one `ffn_gate_up_exps` with gate rows first."""
    gate_up = state[f"{layer}.mlp.experts.gate_up_proj"].transpose(1, 2)
    bias = state[f"{layer}.mlp.experts.gate_up_proj_bias"]
    down = {
        "ffn_down_exps.weight": state[f"{layer}.mlp.experts.down_proj"].transpose(1, 2),
        "ffn_down_exps.bias": state[f"{layer}.mlp.experts.down_proj_bias"],
    }
    if fused:
        return down | {
            "ffn_gate_up_exps.weight": torch.cat([gate_up[:, ::2], gate_up[:, 1::2]], dim=1),
            "ffn_gate_up_exps.bias": torch.cat([bias[:, ::2], bias[:, 1::2]], dim=1),
        }
    return down | {
        "ffn_gate_exps.weight": gate_up[:, ::2],
        "ffn_up_exps.weight": gate_up[:, 1::2],
        "ffn_gate_exps.bias": bias[:, ::2],
        "ffn_up_exps.bias": bias[:, 1::2],
    }


def _mxfp4_values(weight: torch.Tensor) -> torch.Tensor:
    blocks = quantize(np.ascontiguousarray(weight.float().numpy()), MXFP4)
    return torch.from_numpy(dequantize(blocks, MXFP4).copy()).reshape(weight.shape)


@torch.no_grad()
def mxfp4_round_experts_(model: torch.nn.Module) -> None:
    """Replace every expert weight by its MXFP4 rounding (blocks of 32 along the input dim)."""
    for layer in model.model.layers:
        experts = layer.mlp.experts
        experts.gate_up_proj.copy_(_mxfp4_values(experts.gate_up_proj.transpose(1, 2)).transpose(1, 2))
        experts.down_proj.copy_(_mxfp4_values(experts.down_proj.transpose(1, 2)).transpose(1, 2))


def write_gpt_oss_gguf(
    path: Path,
    model: torch.nn.Module,
    pre: str = "gpt-4o",
    fused: bool = False,
    expert_type: gguf.GGMLQuantizationType = MXFP4,
) -> None:
    config = model.config
    state = {name: tensor.detach().float() for name, tensor in model.state_dict().items()}
    rope = config.rope_parameters
    w = gguf.GGUFWriter(path, arch="gpt-oss")
    w.add_context_length(config.max_position_embeddings)
    w.add_embedding_length(config.hidden_size)
    w.add_feed_forward_length(config.intermediate_size)
    w.add_block_count(config.num_hidden_layers)
    w.add_head_count(config.num_attention_heads)
    w.add_head_count_kv(config.num_key_value_heads)
    w.add_key_length(config.head_dim)
    w.add_value_length(config.head_dim)
    w.add_rope_freq_base(rope["rope_theta"])
    w.add_layer_norm_rms_eps(config.rms_norm_eps)
    w.add_expert_count(config.num_local_experts)
    w.add_expert_used_count(config.num_experts_per_tok)
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(rope["factor"])
    w.add_rope_scaling_orig_ctx_len(rope["original_max_position_embeddings"])
    w.add_rope_scaling_yarn_beta_fast(rope["beta_fast"])
    w.add_rope_scaling_yarn_beta_slow(rope["beta_slow"])
    w.add_sliding_window(config.sliding_window)
    w.add_expert_feed_forward_length(config.intermediate_size)
    add_vocabulary(w, pre)
    tensors = {
        "token_embd.weight": state["model.embed_tokens.weight"],
        "output_norm.weight": state["model.norm.weight"],
        "output.weight": state["lm_head.weight"],
    }
    for i in range(config.num_hidden_layers):
        layer = f"model.layers.{i}"
        tensors[f"blk.{i}.attn_sinks.weight"] = state[f"{layer}.self_attn.sinks"]
        for hf, ggml in _NAMES.items():
            for kind in ("weight", "bias"):
                if f"{layer}.{hf}.{kind}" in state:
                    tensors[f"blk.{i}.{ggml}.{kind}"] = state[f"{layer}.{hf}.{kind}"]
        tensors |= {f"blk.{i}.{name}": t for name, t in _ggml_experts(layer, state, fused).items()}
    write_tensors_and_close(w, tensors, lambda name: expert_type if name.endswith("_exps.weight") else None)
