"""The rotary reference against transformers, an independent implementation.

Tables are compared with `LlamaRotaryEmbedding` (whose frequencies come from the rope init
functions in `transformers.modeling_rope_utils`) and application with the Llama (NeoX layout) and
GPT-J (interleaved layout) `apply_rotary_pos_emb`.
"""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig
from transformers.models.gptj import modeling_gptj
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

from sglang.ops.rotary import RopeScaling, RotaryTable, apply_rotary

HEADS, KV_HEADS, DIM, BASE = 4, 2, 16, 10000.0
ORIGINAL_MAX = 64
TABLE_SIZE = 256
ANGLE_TOL = {"atol": 1e-4, "rtol": 1e-4}
"""HF forms position * frequency in float32; at position ~250 that is ~1e-5 rad off float64."""

ROPE_PARAMETERS = {
    "default": {"rope_type": "default"},
    "linear": {"rope_type": "linear", "factor": 4.0},
    # original 64 puts the 16-dim frequencies on both sides of and inside llama3's smoothing band.
    "llama3": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": ORIGINAL_MAX,
    },
}


def hf_rotary(parameters: dict) -> LlamaRotaryEmbedding:
    config = LlamaConfig(
        hidden_size=HEADS * DIM,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=DIM,
        max_position_embeddings=ORIGINAL_MAX if parameters["rope_type"] == "dynamic" else TABLE_SIZE,
        rope_parameters={"rope_theta": BASE, **parameters},
    )
    return LlamaRotaryEmbedding(config)


def hf_cos_sin(rotary: LlamaRotaryEmbedding, positions: torch.Tensor) -> torch.Tensor:
    cos, sin = rotary(torch.zeros(1, len(positions), DIM), positions[None])
    half = DIM // 2  # HF repeats the frequencies over both halves; the table keeps one copy
    return torch.cat([cos[0, :, :half], sin[0, :, :half]], dim=-1)


@pytest.mark.parametrize("kind", sorted(ROPE_PARAMETERS))
def test_table_matches_transformers(kind: str) -> None:
    scaling = RopeScaling.from_config(ROPE_PARAMETERS[kind])
    table = RotaryTable.build(DIM, TABLE_SIZE, BASE, scaling).cos_sin
    positions = torch.cat([torch.arange(8), torch.randint(8, TABLE_SIZE, (24,))])
    torch.testing.assert_close(table[positions], hf_cos_sin(hf_rotary(ROPE_PARAMETERS[kind]), positions), **ANGLE_TOL)


def test_dynamic_table_matches_transformers_incremental_decoding() -> None:
    """Within the original length dynamic NTK is plain rope; beyond it, position p uses the base
    HF computes when decoding token p (sequence length p + 1)."""
    rotary = hf_rotary({"rope_type": "dynamic", "factor": 2.0})
    scaling = RopeScaling(kind="dynamic", factor=2.0, original_max_position=ORIGINAL_MAX)
    table = RotaryTable.build(DIM, TABLE_SIZE, BASE, scaling).cos_sin
    within = torch.arange(ORIGINAL_MAX)
    torch.testing.assert_close(table[within], hf_cos_sin(rotary, within), **ANGLE_TOL)
    beyond = [ORIGINAL_MAX, ORIGINAL_MAX + 7, 150, TABLE_SIZE - 1]
    for p in beyond:
        expected = hf_cos_sin(rotary, torch.tensor([p]))
        torch.testing.assert_close(table[p : p + 1], expected, **ANGLE_TOL)
    plain = RotaryTable.build(DIM, TABLE_SIZE, BASE).cos_sin
    assert not torch.allclose(table[beyond], plain[beyond], atol=1e-3), "scaling had no effect"


def test_longrope_table_matches_transformers_incremental_decoding() -> None:
    """Phi-3's longrope: short factors within the original length, long ones past it (the factors
    HF uses when decoding token p), both times the attention factor of max/original positions."""
    parameters = {
        "rope_type": "longrope",
        "short_factor": [1.0, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0],
        "long_factor": [1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0],
        "original_max_position_embeddings": ORIGINAL_MAX,
    }
    rotary = hf_rotary(parameters)
    scaling = RopeScaling.from_config(parameters, max_position=TABLE_SIZE)
    assert scaling.attention_factor > 1.1  # 256 / 64 positions
    table = RotaryTable.build(DIM, TABLE_SIZE, BASE, scaling).cos_sin
    within = torch.arange(ORIGINAL_MAX)
    torch.testing.assert_close(table[within], hf_cos_sin(rotary, within), **ANGLE_TOL)
    for p in [ORIGINAL_MAX, ORIGINAL_MAX + 9, TABLE_SIZE - 1]:
        torch.testing.assert_close(table[p : p + 1], hf_cos_sin(rotary, torch.tensor([p])), **ANGLE_TOL)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_neox_application_matches_llama(dtype: torch.dtype) -> None:
    tokens = 7
    positions = torch.randint(0, TABLE_SIZE, (tokens,))
    q, k = torch.randn(tokens, HEADS, DIM, dtype=dtype), torch.randn(tokens, KV_HEADS, DIM, dtype=dtype)
    table = RotaryTable.build(DIM, TABLE_SIZE, BASE).cos_sin
    q_out, k_out = apply_rotary(positions, q, k, table, is_neox=True)

    cos, sin = hf_rotary(ROPE_PARAMETERS["default"])(q.float(), positions[None])
    # HF's layout is [batch, heads, tokens, dim].
    q_hf, k_hf = apply_rotary_pos_emb(q.float().transpose(0, 1)[None], k.float().transpose(0, 1)[None], cos, sin)
    assert q_out.dtype == dtype
    tol = ANGLE_TOL if dtype == torch.float32 else {"atol": 2e-2, "rtol": 2e-2}
    torch.testing.assert_close(q_out.float(), q_hf[0].transpose(0, 1), **tol)
    torch.testing.assert_close(k_out.float(), k_hf[0].transpose(0, 1), **tol)


def test_interleaved_application_matches_gptj_with_partial_rotary_dim() -> None:
    """GPT-J rotates adjacent pairs over the first `rotary_dim` dims and passes the rest through."""
    tokens, rotary_dim = 5, 8
    positions = torch.randint(0, TABLE_SIZE, (tokens,))
    q, k = torch.randn(tokens, HEADS, DIM), torch.randn(tokens, KV_HEADS, DIM)
    table = RotaryTable.build(rotary_dim, TABLE_SIZE, BASE).cos_sin
    q_out, k_out = apply_rotary(positions, q, k, table, is_neox=False)

    sin, cos = modeling_gptj.create_sinusoidal_positions(TABLE_SIZE, rotary_dim)[positions].chunk(2, dim=-1)
    for ours, x in ((q_out, q), (k_out, k)):
        rotated = modeling_gptj.apply_rotary_pos_emb(x[None, :, :, :rotary_dim], sin[None], cos[None])[0]
        torch.testing.assert_close(ours[..., :rotary_dim], rotated, **ANGLE_TOL)
        assert torch.equal(ours[..., rotary_dim:], x[..., rotary_dim:])


def test_scaling_config_parsing() -> None:
    assert RopeScaling.from_config(None) == RopeScaling()
    legacy = RopeScaling.from_config({"type": "linear", "factor": 2})
    assert (legacy.kind, legacy.factor) == ("linear", 2.0)
    with pytest.raises(ValueError, match=r"'su'.*supported: default, linear, dynamic, llama3, longrope, yarn"):
        RopeScaling.from_config({"rope_type": "su", "factor": 4.0})
    yarn = RopeScaling.from_config({"rope_type": "yarn", "factor": 4.0, "mscale": 1.0, "mscale_all_dim": 0.8})
    assert yarn.kind == "yarn" and yarn.softmax_scale_factor > 1.0 and yarn.attention_factor != 1.0
