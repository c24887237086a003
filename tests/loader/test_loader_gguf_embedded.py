"""The embedded SmolLM2 GGUF: config extraction and weights after dequantization and un-permutation.

The default-run checks compare against an independent computation from the raw GGUF data
(dequantized with gguf, reordered with the reverse permutation transformers documents) and check
the property the un-permutation exists for: Hugging Face's rotate-half rotary on the converted
weights gives the same attention scores as llama.cpp's interleaved rotary on the file's weights.
The slow test compares every tensor with transformers' own GGUF loading.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf.quants import dequantize

from sglang.runtime.loader import ModelSource
from sglang.runtime.loader.gguf_config import gguf_to_hf_config
from sglang.runtime.loader.gguf_file import GGUFFile

HEADS, KV_HEADS, HEAD_DIM, THETA = 9, 3, 64, 100000.0


def raw(gf: GGUFFile, name: str) -> torch.Tensor:
    t = gf.tensors[name]
    return torch.from_numpy(np.array(dequantize(t.data, t.tensor_type))).reshape(
        tuple(reversed([int(d) for d in t.shape]))
    )


def hf_reverse_permute(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """transformers' `LlamaTensorProcessor._reverse_permute_weights`, as documented there."""
    dim = w.shape[0] // n_head // 2
    return w.reshape(n_head, dim, 2, *w.shape[1:]).swapaxes(2, 1).reshape(w.shape)


def test_config(embedded_source: ModelSource, embedded_gguf: GGUFFile) -> None:
    config = embedded_source.config
    assert config == gguf_to_hf_config(embedded_gguf)
    expected = {
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 576,
        "num_hidden_layers": 30,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "head_dim": 64,
        "intermediate_size": 1536,
        "vocab_size": 49152,
        "max_position_embeddings": 8192,
        "rope_theta": 100000.0,
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": True,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    assert {k: config[k] for k in expected} == expected
    assert "torch_dtype" not in config  # Q4_1: "auto" picks the platform default
    assert embedded_source.num_tensors == 272 and embedded_source.dtype == torch.float32


def test_weights_match_independent_dequantization(
    embedded_weights: dict[str, torch.Tensor], embedded_gguf: GGUFFile
) -> None:
    assert "lm_head.weight" not in embedded_weights  # tied, as in the Hugging Face checkpoint
    assert len(embedded_weights) == 272 and all(t.dtype == torch.float32 for t in embedded_weights.values())
    for layer in (0, 29):
        prefix = f"model.layers.{layer}.self_attn"
        q, k = raw(embedded_gguf, f"blk.{layer}.attn_q.weight"), raw(embedded_gguf, f"blk.{layer}.attn_k.weight")
        assert torch.equal(embedded_weights[f"{prefix}.q_proj.weight"], hf_reverse_permute(q, HEADS))
        assert torch.equal(embedded_weights[f"{prefix}.k_proj.weight"], hf_reverse_permute(k, KV_HEADS))
        assert not torch.equal(embedded_weights[f"{prefix}.q_proj.weight"], q)
        assert torch.equal(
            embedded_weights[f"{prefix}.v_proj.weight"], raw(embedded_gguf, f"blk.{layer}.attn_v.weight")
        )
        assert torch.equal(
            embedded_weights[f"model.layers.{layer}.mlp.down_proj.weight"],
            raw(embedded_gguf, f"blk.{layer}.ffn_down.weight"),
        )
    assert torch.equal(embedded_weights["model.embed_tokens.weight"], raw(embedded_gguf, "token_embd.weight"))
    assert torch.equal(embedded_weights["model.norm.weight"], raw(embedded_gguf, "output_norm.weight"))


def _angles(positions: torch.Tensor) -> torch.Tensor:
    inv_freq = THETA ** (-torch.arange(0, HEAD_DIM, 2, dtype=torch.float64) / HEAD_DIM)
    return positions[:, None].double() * inv_freq  # (tokens, head_dim / 2)


def rope_rotate_half(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Hugging Face layout: dimension i pairs with i + head_dim / 2."""
    a = _angles(positions)[:, None, :]
    x1, x2 = x[..., : HEAD_DIM // 2], x[..., HEAD_DIM // 2 :]
    return torch.cat([x1 * a.cos() - x2 * a.sin(), x2 * a.cos() + x1 * a.sin()], dim=-1)


def rope_interleaved(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """llama.cpp's normal rope mode: dimension 2i pairs with 2i + 1."""
    a = _angles(positions)[:, None, :]
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * a.cos() - x2 * a.sin(), x2 * a.cos() + x1 * a.sin()], dim=-1).flatten(-2)


def _scores(wq: torch.Tensor, wk: torch.Tensor, rope, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    q = rope((x @ wq.double().T).view(len(x), HEADS, HEAD_DIM), positions)
    k = rope((x @ wk.double().T).view(len(x), KV_HEADS, HEAD_DIM), positions)
    k = k.repeat_interleave(HEADS // KV_HEADS, dim=1)
    return torch.einsum("qhd,khd->hqk", q, k)


def test_rotary_layout_equivalence(embedded_weights: dict[str, torch.Tensor], embedded_gguf: GGUFFile) -> None:
    x = torch.randn(7, 576, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    positions = torch.tensor([0, 1, 2, 5, 17, 300, 4000])
    ours = _scores(
        embedded_weights["model.layers.3.self_attn.q_proj.weight"],
        embedded_weights["model.layers.3.self_attn.k_proj.weight"],
        rope_rotate_half,
        x,
        positions,
    )
    q, k = raw(embedded_gguf, "blk.3.attn_q.weight"), raw(embedded_gguf, "blk.3.attn_k.weight")
    llama_cpp = _scores(q, k, rope_interleaved, x, positions)
    torch.testing.assert_close(ours, llama_cpp, rtol=1e-9, atol=1e-9)
    # Without the un-permutation the scores are wrong: the check above has teeth.
    assert not torch.allclose(_scores(q, k, rope_rotate_half, x, positions), llama_cpp, rtol=1e-3, atol=1e-3)


@pytest.mark.slow
def test_weights_match_transformers_gguf_loading(embedded_path, embedded_weights: dict[str, torch.Tensor]) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        str(embedded_path.parent), gguf_file=embedded_path.name, dtype=torch.float32
    )
    reference = {n: t for n, t in model.state_dict().items() if n != "lm_head.weight"}  # tied to the embedding
    assert reference.keys() == embedded_weights.keys()
    for name, tensor in reference.items():
        assert torch.equal(embedded_weights[name], tensor), name


def test_converted_folder_generates_with_transformers(embedded_source: ModelSource, embedded_tokenizer) -> None:
    """The cache folder is an ordinary Hugging Face folder: transformers loads it and answers correctly."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        str(embedded_source.folder), dtype=torch.float32, local_files_only=True
    )
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    inputs = embedded_tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    output = model.generate(**inputs, max_new_tokens=12, do_sample=False)
    answer = embedded_tokenizer.decode(output[0, inputs["input_ids"].shape[1] :])
    assert answer == "The capital of France is Paris.<|im_end|>"
