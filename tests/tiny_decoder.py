"""The tiny random-weight model and host platform that step-runner tests build a `ModelRunner`
from, without a checkpoint: a 2-layer Llama-style decoder (grouped-query attention, untied
embeddings) and a cpu platform carrying the device runtime under test.

Invariant: `tiny_llama_decoder()` is the same model every call (seeded weights, float32), so two
runners built from two calls compute the same logits.
"""

from __future__ import annotations

import torch

from sglang.platforms.cpu.platform import CpuPlatform
from sglang.platforms.device_runtime import DeviceRuntime
from sglang.runtime.models.config import ModelConfig
from sglang.runtime.models.decoder import DecoderForCausalLM

TINY_LLAMA_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 96,
    "vocab_size": 97,
    "max_position_embeddings": 128,
    "tie_word_embeddings": False,
}
WEIGHT_SCALE = 0.2
"""Small enough that 2 layers of random weights keep activations (and greedy choices) stable."""


def tiny_llama_decoder(seed: int = 0) -> DecoderForCausalLM:
    """The tiny Llama-style decoder, every parameter drawn from a generator seeded with `seed`."""
    model = DecoderForCausalLM(ModelConfig.from_dict(TINY_LLAMA_CONFIG), torch.float32)
    gen = torch.Generator().manual_seed(seed)
    for param in model.parameters():
        param.data = torch.randn(param.shape, generator=gen) * WEIGHT_SCALE
    return model


def cpu_platform_with(runtime: DeviceRuntime) -> CpuPlatform:
    """A cpu platform whose device runtime is `runtime` (a stand-in's graphs on host tensors)."""

    class CpuPlatformUnderTest(CpuPlatform):
        pass

    CpuPlatformUnderTest.runtime = runtime
    return CpuPlatformUnderTest()
