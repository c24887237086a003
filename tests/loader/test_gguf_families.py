"""Mixtral, Phi-3, Gemma 2/3, DeepSeek V2/V3 and GLM-4-MoE from GGUF, at logit parity with transformers.

Each tiny random model (the model-parity specs, adjusted to what a GGUF can say: see `FAMILIES`)
is written at test time as llama.cpp's converter writes it (`gguf_family_synth`), loaded the way
`sglang serve --model-path x.gguf` loads it, and its logits over three prompts (7, 13 and 3
tokens; the windows are 4) must match transformers' on the same weights within fp32 1e-4.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from sglang.ci.suites.model_harness import (
    FP32_ATOL,
    SCHEDULES,
    hf_logits,
    make_prompts,
    max_abs_error,
    run_schedule,
)
from sglang.ops.binding import restore, snapshot
from sglang.ops.quant import QuantizedWeight
from sglang.runtime.loader import gguf_quantized, gguf_source, open_model_source
from sglang.runtime.loader.errors import UnsupportedModelError
from sglang.runtime.loader.gguf_config import gguf_to_hf_config
from sglang.runtime.loader.gguf_file import GGUFFile
from sglang.runtime.loader.gguf_quantized import quantized_tensors
from sglang.runtime.loader.model_loading import load_model
from sglang.runtime.server_args import ServerArgs

from .gguf_family_models import FAMILIES, Built, family_builder
from .gguf_family_synth import write_family_gguf
from .gguf_synth import TOKENS

SLOW = {"mixtral", "gemma2", "gemma3", "deepseek-v2", "deepseek-v3", "glm4moe"}
"""Their logit checks cost the most (transformers' first MoE build, the Gemma layers, MLA: 0.6 to
7.7 s each for DeepSeek under load 5-6); their weights and config are checked by default, as are
the Gemma attention-scale and default rules, and Phi-3's logits run the shared GGUF path by default."""


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Built]:
    return family_builder(tmp_path_factory)


@pytest.mark.parametrize("name", FAMILIES)
def test_weights_equal_the_transformers_ones(name: str, build, tmp_path: Path) -> None:
    """The converted tensors, by Hugging Face name, are transformers' own: Gemma's norms lose the
    converter's +1, Phi-3's fused tensors keep their row order, Mixtral's Q/K are
    un-permuted, DeepSeek's `kv_b_proj` is joined from `attn_k_b` and `attn_v_b`, and experts are
    split per expert (restacked here to compare)."""
    hf_model, gguf_path = build(name)
    ours = dict(open_model_source(gguf_path, "float32", cache_dir=tmp_path).weights())
    theirs = {
        k: v for k, v in hf_model.state_dict().items() if not (k == "lm_head.weight" and name.startswith("gemma"))
    }
    for key in [k for k in theirs if k.endswith("mlp.experts.gate_up_proj")]:
        layer, experts = key.removesuffix(".gate_up_proj"), range(theirs[key].shape[0])
        gate_up = [
            torch.cat([ours.pop(f"{layer}.{e}.gate_proj.weight"), ours.pop(f"{layer}.{e}.up_proj.weight")])
            for e in experts
        ]
        ours[key] = torch.stack(gate_up)
        ours[f"{layer}.down_proj"] = torch.stack([ours.pop(f"{layer}.{e}.down_proj.weight") for e in experts])
    assert ours.keys() == theirs.keys()
    for key, tensor in theirs.items():
        if name.startswith("gemma") and key.endswith("norm.weight"):
            # (1 + w) - 1 rounds w, but the `1 + w` the model multiplies by is transformers' exactly.
            ours[key], tensor = ours[key] + 1, tensor + 1
        assert torch.equal(ours[key], tensor), key


@pytest.mark.parametrize("name", [pytest.param(f, marks=pytest.mark.slow) if f in SLOW else f for f in FAMILIES])
def test_logits_match_transformers(name: str, build, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hf_model, gguf_path = build(name)
    # The conversion goes to this test's folder; the rest of the cache (built kernels) stays shared.
    monkeypatch.setattr(gguf_source, "cache_root", lambda kind: tmp_path / kind)
    saved = snapshot()
    try:
        loaded = load_model(ServerArgs(model_path=str(gguf_path), device="cpu", dtype="float32"))
        assert type(loaded.model).__name__ == hf_model.config.architectures[0]
        prompts = make_prompts(len(TOKENS))
        logits = run_schedule(loaded.model, torch.device("cpu"), prompts, SCHEDULES["extend"]())
    finally:
        restore(saved)
    error = max_abs_error(logits, hf_logits(hf_model, prompts))
    assert error <= FP32_ATOL, f"{name} from GGUF: max abs logit error {error:.3g}"


@pytest.mark.parametrize("name", FAMILIES)
def test_config_comes_from_the_gguf_metadata(name: str, build, tmp_path: Path) -> None:
    """What the GGUF says, or llama.cpp assumes, equals the transformers config it came from."""
    hf_model, gguf_path = build(name)
    config, expected = open_model_source(gguf_path, "auto", cache_dir=tmp_path).config, hf_model.config
    assert config["architectures"] == expected.architectures
    if name == "mixtral":
        assert (config["num_local_experts"], config["num_experts_per_tok"]) == (4, 2)
        assert config["rope_theta"] == expected.rope_parameters["rope_theta"]
    if name == "phi3":
        rope = expected.rope_parameters
        assert config["partial_rotary_factor"] == rope["partial_rotary_factor"]
        assert config["rope_scaling"]["long_factor"] == rope["long_factor"]
        assert config["rope_scaling"]["short_factor"] == rope["short_factor"]
        assert config["original_max_position_embeddings"] == rope["original_max_position_embeddings"]
        assert "sliding_window" not in config
    if name.startswith("gemma"):
        assert config["query_pre_attn_scalar"] == expected.query_pre_attn_scalar
        assert config["layer_types"] == expected.layer_types and config["sliding_window"] == 4
        assert config["final_logit_softcapping"] == expected.final_logit_softcapping
        assert config["attn_logit_softcapping"] == expected.attn_logit_softcapping
    if name == "gemma3":
        assert config["rope_local_base_freq"] == 10000.0
        assert config["rope_scaling"] == {"rope_type": "linear", "factor": 2.0}


def _gemma_metadata(arch: str, layers: int, **extra: Any) -> GGUFFile:
    """A metadata-only Gemma file of a real size: 46 layers is the 27B Gemma 2, 62 the 27B Gemma 3."""
    keys = {
        "block_count": layers,
        "attention.head_count": 32,
        "attention.head_count_kv": 16,
        "attention.key_length": 128,
        "embedding_length": 4608,
        "feed_forward_length": 36864,
        "context_length": 8192,
        "attention.layer_norm_rms_epsilon": 1e-6,
        **extra,
    }
    metadata = {"general.architecture": arch, **{f"{arch}.{k}": v for k, v in keys.items()}}
    embed = type("Tensor", (), {"shape": [4608, 256]})()
    return GGUFFile(Path(f"{arch}.gguf"), metadata, {"token_embd.weight": embed})


@pytest.mark.parametrize(
    ("arch", "layers", "scalar"),
    [("gemma2", 46, 144), ("gemma2", 42, 128), ("gemma3", 62, 144), ("gemma3", 34, 128)],
)
def test_gemma_attention_scale_follows_llama_cpp(arch: str, layers: int, scalar: int) -> None:
    """llama.cpp's `f_attention_scale`: `n_embd / n_head` (here 144) for the 27B sizes, else the
    head dim (128), matching gemma-2-27b's query_pre_attn_scalar 144 = 4608 / 32."""
    assert (
        gguf_to_hf_config(_gemma_metadata(arch, layers, **{"attention.sliding_window": 4096}))["query_pre_attn_scalar"]
        == scalar
    )


def test_gemma_defaults_follow_llama_cpp() -> None:
    """Gemma 2 without soft-cap or window keys: llama.cpp's 50, 30 and 4096; Gemma 3 without a
    window: no windowed layers and no local rotary base."""
    gemma2 = gguf_to_hf_config(_gemma_metadata("gemma2", 4))
    assert (gemma2["attn_logit_softcapping"], gemma2["final_logit_softcapping"]) == (50.0, 30.0)
    assert gemma2["sliding_window"] == 4096 and gemma2["layer_types"][:2] == ["sliding_attention", "full_attention"]
    gemma3 = gguf_to_hf_config(_gemma_metadata("gemma3", 4))
    assert "sliding_window" not in gemma3 and "rope_local_base_freq" not in gemma3
    assert gemma3["final_logit_softcapping"] is None


def test_unknown_architecture_is_refused_by_name() -> None:
    gf = GGUFFile(Path("m.gguf"), {"general.architecture": "mamba"}, {})
    with pytest.raises(UnsupportedModelError, match="'mamba' is not supported"):
        gguf_to_hf_config(gf)


def _phi3_q8_0(build, tmp_path: Path) -> tuple[torch.nn.Module, Path]:
    hf_model, _ = build("phi3")
    path = tmp_path / "phi3-q8.gguf"
    write_family_gguf(path, "phi3", hf_model, q8_0=("attn_qkv", "ffn_up"))
    return hf_model, path


def test_phi3_fused_q8_0_tensors_are_kept_as_their_parts(build, tmp_path: Path) -> None:
    """A Q8_0 `attn_qkv` / `ffn_up` is kept int8 as q/k/v and gate/up rows (the names the fused
    layers are stacked from), each exactly the dense conversion's rows."""
    hf_model, path = _phi3_q8_0(build, tmp_path)
    kept = quantized_tensors(path, tmp_path / "kept")
    dense = dict(open_model_source(path, "float32", cache_dir=tmp_path / "dense").weights())
    assert len(kept) == 5 * hf_model.config.num_hidden_layers
    parts = {"self_attn.qkv_proj": ("q_proj", "k_proj", "v_proj"), "mlp.gate_up_proj": ("gate_proj", "up_proj")}
    for fused, names in parts.items():
        group = fused.split(".")[0]
        rows = torch.cat([kept[f"model.layers.1.{group}.{n}.weight"].dequantize() for n in names])
        assert torch.equal(rows, dense[f"model.layers.1.{fused}.weight"]), fused


@pytest.mark.slow
def test_phi3_fused_q8_0_tensors_are_served_as_int8(build, tmp_path: Path, monkeypatch) -> None:
    """Served with dtype auto (kept quantization), the fused layers hold the int8 weights, and the
    logits equal the dense float32 load's (the cpu int8 path dequantizes exactly)."""
    hf_model, path = _phi3_q8_0(build, tmp_path)
    for module in (gguf_source, gguf_quantized):  # both conversions go to this test's folder
        monkeypatch.setattr(module, "cache_root", lambda kind: tmp_path / kind)
    saved = snapshot()
    try:
        served = load_model(ServerArgs(model_path=str(path), device="cpu", dtype="auto"))
        reference = load_model(ServerArgs(model_path=str(path), device="cpu", dtype="float32"))
        int8_layers = [m for m in served.model.modules() if isinstance(getattr(m, "weight", None), QuantizedWeight)]
        assert len(int8_layers) == 2 * hf_model.config.num_hidden_layers
        prompts = make_prompts(len(TOKENS))
        ours = run_schedule(served.model, torch.device("cpu"), prompts, SCHEDULES["extend"]())
        theirs = run_schedule(reference.model, torch.device("cpu"), prompts, SCHEDULES["extend"]())
    finally:
        restore(saved)
    assert max_abs_error(ours, theirs) <= FP32_ATOL


def test_early_mixtral_per_expert_tensors_load_like_stacked_ones(build, tmp_path: Path) -> None:
    """Early Mixtral GGUFs store `blk.N.ffn_gate.E.weight` per expert (llama.cpp's
    LLM_TENSOR_FFN_GATE_EXP); they convert to the same tensors as the stacked layout."""
    hf_model, stacked_path = build("mixtral")
    split_path = tmp_path / "mixtral-split.gguf"
    write_family_gguf(split_path, "llama", hf_model, split_experts=True)
    assert "blk.0.ffn_gate.3.weight" in GGUFFile.open(split_path).tensors
    split = dict(open_model_source(split_path, "float32", cache_dir=tmp_path / "split").weights())
    stacked = dict(open_model_source(stacked_path, "float32", cache_dir=tmp_path / "stacked").weights())
    assert split.keys() == stacked.keys()
    assert all(torch.equal(split[name], tensor) for name, tensor in stacked.items())
