"""Qwen dense architectures: Qwen2 (QKV bias, from the config) and Qwen3 (per-head q/k RMSNorm)."""

from sglang.runtime.models.decoder import DecoderForCausalLM
from sglang.runtime.models.traits import DecoderTraits


class Qwen2ForCausalLM(DecoderForCausalLM):
    default_qkv_bias = True


class Qwen3ForCausalLM(DecoderForCausalLM):
    traits = DecoderTraits(qk_norm=True)
