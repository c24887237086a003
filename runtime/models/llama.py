"""Llama-family architectures: Llama 2/3/3.1 (rope scaling from the config), SmolLM2, Mistral
(sliding window from the config)."""

from sglang.runtime.models.decoder import DecoderForCausalLM


class LlamaForCausalLM(DecoderForCausalLM):
    pass


class MistralForCausalLM(DecoderForCausalLM):
    pass
