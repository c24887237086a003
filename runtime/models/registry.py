"""Architecture registry keyed by the config's `architectures`; classes import lazily."""

from __future__ import annotations

from sglang.ops.binding import resolve
from sglang.runtime.models.config import ModelConfig
from sglang.runtime.models.decoder import DecoderForCausalLM

ARCHITECTURES: dict[str, str] = {
    "LlamaForCausalLM": "sglang.runtime.models.llama:LlamaForCausalLM",
    "MistralForCausalLM": "sglang.runtime.models.llama:MistralForCausalLM",
    "Qwen2ForCausalLM": "sglang.runtime.models.qwen:Qwen2ForCausalLM",
    "Qwen3ForCausalLM": "sglang.runtime.models.qwen:Qwen3ForCausalLM",
    "Gemma2ForCausalLM": "sglang.runtime.models.gemma:Gemma2ForCausalLM",
    "Gemma3ForCausalLM": "sglang.runtime.models.gemma:Gemma3ForCausalLM",
    "Phi3ForCausalLM": "sglang.runtime.models.phi:Phi3ForCausalLM",
    "Glm4MoeForCausalLM": "sglang.runtime.models.glm:Glm4MoeForCausalLM",
    "DeepseekV2ForCausalLM": "sglang.runtime.models.deepseek:DeepseekV2ForCausalLM",
    "DeepseekV3ForCausalLM": "sglang.runtime.models.deepseek:DeepseekV3ForCausalLM",
    "GptOssForCausalLM": "sglang.runtime.models.gpt_oss:GptOssForCausalLM",
    "MixtralForCausalLM": "sglang.runtime.models.mixture:MixtralForCausalLM",
    "Qwen2MoeForCausalLM": "sglang.runtime.models.mixture:Qwen2MoeForCausalLM",
    "Qwen3MoeForCausalLM": "sglang.runtime.models.mixture:Qwen3MoeForCausalLM",
}


class UnsupportedArchitectureError(ValueError):
    pass


def model_class_for(config: ModelConfig) -> type[DecoderForCausalLM]:
    for arch in config.architectures:
        if arch in ARCHITECTURES:
            return resolve(ARCHITECTURES[arch])
    named = ", ".join(config.architectures) or "none"
    raise UnsupportedArchitectureError(
        f"architecture {named} is not supported (supported: {', '.join(sorted(ARCHITECTURES))})"
    )
