"""What an architecture declares about its decoder beyond what its config says.

The decoder reads these flags; the config supplies the numbers (window, soft-caps, scales).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DecoderTraits:
    qk_norm: bool = False
    """Per-head RMSNorm of queries and keys before rotary (Qwen 3, Gemma 3)."""
    norm_unit_offset: bool = False
    """Every RMSNorm scales by `1 + w` rather than `w` (Gemma)."""
    sandwich_norms: bool = False
    """Attention and MLP outputs are normalized before their residual add (Gemma 2/3: the
    checkpoint's `post_attention_layernorm` and `post_feedforward_layernorm`; the MLP's input
    norm is then `pre_feedforward_layernorm`)."""
    scaled_embedding: bool = False
    """Embeddings are multiplied by `sqrt(hidden_size)`, rounded to the model dtype (Gemma)."""
    output_bias: bool = False
    """The attention output projection has a bias when the config's `attention_bias` is on
    (gpt-oss); Llama-style configs put it on q/k/v only here."""
