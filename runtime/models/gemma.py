"""Gemma 2 and Gemma 3 (text): alternating sliding-window and global layers, `1 + w` norms around
both the attention and the MLP, scaled embeddings, GELU-tanh MLP.

The config says the rest: the window and which layers use it (`layer_types`), attention and
final-logit soft-capping, the query scale (`query_pre_attn_scalar`) and Gemma 3's separate
rotary base for its sliding layers.
"""

from sglang.runtime.models.decoder import DecoderForCausalLM
from sglang.runtime.models.traits import DecoderTraits

GEMMA = DecoderTraits(norm_unit_offset=True, sandwich_norms=True, scaled_embedding=True)


class Gemma2ForCausalLM(DecoderForCausalLM):
    traits = GEMMA
    checkpoint_renames = {
        # Order matters: the attention output norm is renamed before the MLP input norm takes
        # the name `post_attention_layernorm`, which the decoder gives the norm fused with the
        # residual add in every architecture.
        ".post_attention_layernorm.": ".attention_output_norm.",
        ".pre_feedforward_layernorm.": ".post_attention_layernorm.",
        ".post_feedforward_layernorm.": ".mlp_output_norm.",
    }


class Gemma3ForCausalLM(Gemma2ForCausalLM):
    traits = DecoderTraits(qk_norm=True, norm_unit_offset=True, sandwich_norms=True, scaled_embedding=True)
