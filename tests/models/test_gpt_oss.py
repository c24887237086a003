"""gpt-oss specifics beyond logit parity (ci/suites/test_model_parity.py's `gpt-oss-sinks`, which
also checks that the sinks move the logits): kernels that cannot honour sinks or biased experts
are refused with the reason, and checkpoints we cannot serve are refused when the config is read."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from sglang.ops.selection import SelectionError
from sglang.platforms.base import ModelFacts
from sglang.platforms.cuda.platform import CudaPlatform
from sglang.platforms.rocm.platform import RocmPlatform
from sglang.platforms.tpu.platform import TpuPlatform
from sglang.runtime.models.config import ModelConfig

# bf16: the vendor attention kernels serve no float32, and they must lose to sinks alone here.
GPT_OSS_FACTS = ModelFacts(
    dtype=torch.bfloat16, head_dim=64, num_heads=8, num_kv_heads=2, features=frozenset({"sinks", "expert_bias"})
)


def test_candidates_without_sinks_or_expert_biases_are_refused_with_the_reason() -> None:
    cuda = CudaPlatform().select_ops(GPT_OSS_FACTS, force_reference=False)
    attention = cuda["attention_backend"]
    assert attention.chosen.family == "triton"  # its kernels take the sinks; flashinfer's here do not
    refused = {r.candidate.family: r.reason for r in attention.rejected if not r.eligible}
    assert set(refused) == {"flashinfer"} and "needs sinks" in refused["flashinfer"]
    assert cuda["moe_experts"].chosen.family == "triton"  # its grouped GEMMs take the biases
    rocm = RocmPlatform().select_ops(GPT_OSS_FACTS, force_reference=False)["moe_experts"]
    assert any(not r.eligible and "expert_bias" in r.reason for r in rocm.rejected if r.candidate.family == "aiter")

    # On tpu the jax.numpy attention takes the sinks; tpu-inference's Pallas kernel does not.
    # Head dim 128, which the Pallas kernel serves: the sinks alone refuse it.
    facts = dataclasses.replace(GPT_OSS_FACTS, head_dim=128)
    tpu = TpuPlatform().select_ops(facts, force_reference=False)["attention_backend"]
    assert tpu.chosen.qualname.endswith("attention:RaggedPagedAttention")
    pallas = [r for r in tpu.rejected if r.candidate.qualname.endswith("PallasRaggedAttention")]
    assert pallas and not pallas[0].eligible and "needs sinks" in pallas[0].reason


def test_override_naming_a_candidate_without_sinks_fails_at_startup() -> None:
    with pytest.raises(SelectionError, match="needs sinks"):
        CudaPlatform().select_ops(GPT_OSS_FACTS, overrides={"attention_backend": "flashinfer"}, force_reference=False)


def test_models_without_the_features_keep_every_candidate() -> None:
    plain = ModelFacts(dtype=torch.bfloat16, head_dim=64, num_heads=8, num_kv_heads=2)
    assert CudaPlatform().select_ops(plain, force_reference=False)["attention_backend"].chosen.family == "flashinfer"


RAW = {
    "architectures": ["GptOssForCausalLM"],
    "model_type": "gpt_oss",
    "hidden_size": 64,
    "intermediate_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 128,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
}


def test_config_declares_sinks_and_biased_experts() -> None:
    config = ModelConfig.from_dict(RAW)
    assert config.attention_sinks and config.moe is not None and config.moe.biased
    assert config.moe.activation == "swigluoai"
    assert config.op_features == {"sinks", "expert_bias"}


def test_mxfp4_checkpoints_are_refused_with_the_reason() -> None:
    with pytest.raises(ValueError, match=r"MXFP4 checkpoints .* not supported"):
        ModelConfig.from_dict({**RAW, "quantization_config": {"quant_method": "mxfp4"}})


def test_other_swiglu_constants_are_refused() -> None:
    with pytest.raises(ValueError, match=r"limit=5\.0 is not supported"):
        ModelConfig.from_dict({**RAW, "swiglu_limit": 5.0})
