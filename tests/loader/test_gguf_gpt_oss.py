"""gpt-oss from GGUF (llama.cpp's `gpt-oss` architecture, MXFP4 experts) into the gpt-oss decoder.

A tiny random gpt-oss (the model-parity spec `gpt-oss-sinks`: sinks, alternating windows shorter
than the prompts, biased router and experts, yarn) is written at test time as llama.cpp writes
one (`gguf_gpt_oss_synth`), with its expert weights first rounded to MXFP4 values so that the
file and transformers hold the same weights. Loaded the way `sglang serve --model-path x.gguf`
loads it, it must equal the same weights loaded from a Hugging Face folder parameter for
parameter, and give transformers' logits. MXFP4 is dequantized to float32 at load.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from gguf.quants import dequantize
from safetensors import safe_open
from transformers import AutoModelForCausalLM

from sglang.ci.suites.model_harness import (
    FP32_ATOL,
    SCHEDULES,
    SPECS_BY_NAME,
    hf_logits,
    make_prompts,
    max_abs_error,
    randomize_,
    run_schedule,
)
from sglang.ops.binding import restore, snapshot
from sglang.runtime.loader import gguf_source, open_model_source
from sglang.runtime.loader.gguf_config import ARCHITECTURES
from sglang.runtime.loader.gguf_families import window_layer_types
from sglang.runtime.loader.gguf_file import GGUFFile
from sglang.runtime.loader.gguf_quantized import quantized_tensors
from sglang.runtime.loader.model_loading import load_model
from sglang.runtime.models.gpt_oss import GptOssForCausalLM
from sglang.runtime.server_args import ServerArgs

from .gguf_gpt_oss_synth import mxfp4_round_experts_, write_gpt_oss_gguf
from .gguf_synth import TOKENS

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]
"""The FP4 E2M1 code points, by nibble (sign bit, 2 exponent bits, 1 mantissa bit)."""


def test_mxfp4_block_dequantizes_as_ggml_defines_it() -> None:
    """ggml's block_mxfp4: byte 0 an E8M0 exponent e (scale 2^(e-127)), bytes 1-16 nibbles; the
    low nibble of byte 1+j is value j, the high nibble value j+16 (dequantize_row_mxfp4)."""
    nibbles = bytes(j | (15 - j) << 4 for j in range(16))
    blocks = np.frombuffer(bytes([130]) + nibbles + bytes([1]) + nibbles, dtype=np.uint8).reshape(1, 34)
    values = dequantize(blocks, gguf.GGMLQuantizationType.MXFP4).reshape(2, 32)
    # e = 130: scale 8, so values 0, 4, 8, 12, 16, 24, 32, 48 and their negatives.
    low = [0, 4, 8, 12, 16, 24, 32, 48, 0, -4, -8, -12, -16, -24, -32, -48]
    assert values[0].tolist() == low + low[::-1]
    # e = 1: scale 2^-126, where ggml's "half" scale is a float32 subnormal.
    assert values[1].tolist() == [c * 2.0**-126 for c in E2M1 + E2M1[::-1]]


@pytest.fixture(scope="module")
def gpt_oss(tmp_path_factory: pytest.TempPathFactory) -> tuple[torch.nn.Module, Path, Path]:
    """(the transformers model, its GGUF, the same weights saved as a Hugging Face folder)."""
    root = tmp_path_factory.mktemp("gpt-oss-gguf")
    torch.manual_seed(0)
    spec = SPECS_BY_NAME["gpt-oss-sinks"]
    model = AutoModelForCausalLM.from_config(spec.hf_config(vocab_size=len(TOKENS)), attn_implementation="eager")
    randomize_(model.eval(), torch.Generator().manual_seed(0))
    mxfp4_round_experts_(model)
    write_gpt_oss_gguf(root / "gpt-oss.gguf", model)
    model.save_pretrained(root / "hf")
    return model, root / "gpt-oss.gguf", root / "hf"


def test_config_comes_from_the_gguf_metadata(gpt_oss, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The config transformers' model was built from, recovered from the GGUF keys alone; the
    log says the MXFP4 experts were dequantized (3 layers x gate, up, down)."""
    hf_model, gguf_path, _ = gpt_oss
    with caplog.at_level(logging.INFO, logger=gguf_source.__name__):
        config = open_model_source(gguf_path, "auto", cache_dir=tmp_path).config
    assert "dequantized to float32 at load: MXFP4 (9 tensors)" in caplog.text
    expected = hf_model.config
    assert config["architectures"] == ["GptOssForCausalLM"] and config["model_type"] == "gpt_oss"
    assert config["layer_types"] == expected.layer_types == ["sliding_attention", "full_attention", "sliding_attention"]
    assert (config["sliding_window"], config["num_local_experts"], config["num_experts_per_tok"]) == (4, 4, 2)
    assert config["intermediate_size"] == expected.intermediate_size and config["attention_bias"] is True
    rope = expected.rope_parameters
    assert config["rope_theta"] == rope["rope_theta"] and config["swiglu_limit"] == expected.swiglu_limit
    assert config["rope_scaling"] == {k: v for k, v in rope.items() if k != "rope_theta"}


def test_weights_and_logits_match_the_hugging_face_folder(gpt_oss, tmp_path: Path, monkeypatch) -> None:
    """`sglang serve --model-path x.gguf`'s loading path picks gpt-oss from the file, and the
    model equals the one loaded from the Hugging Face folder and gives transformers' logits."""
    hf_model, gguf_path, hf_folder = gpt_oss
    # The conversion goes to this test's folder; the rest of the cache (built kernels) stays shared.
    monkeypatch.setattr(gguf_source, "cache_root", lambda kind: tmp_path / kind)
    saved = snapshot()
    try:
        from_gguf = load_model(ServerArgs(model_path=str(gguf_path), device="cpu", dtype="float32"))
        from_hf = load_model(ServerArgs(model_path=str(hf_folder), device="cpu", dtype="float32"))
        assert type(from_gguf.model) is GptOssForCausalLM
        ours, theirs = from_gguf.model.state_dict(), from_hf.model.state_dict()
        assert ours.keys() == theirs.keys()
        for name, tensor in theirs.items():
            assert torch.equal(ours[name], tensor), name
        prompts = make_prompts(len(TOKENS))
        logits = run_schedule(from_gguf.model, torch.device("cpu"), prompts, SCHEDULES["extend"]())
    finally:
        restore(saved)
    error = max_abs_error(logits, hf_logits(hf_model, prompts))
    assert error <= FP32_ATOL, f"gpt-oss from GGUF: max abs logit error {error:.3g}"


def test_fused_gate_up_experts_load_like_separate_ones(gpt_oss, tmp_path: Path) -> None:
    """The converter's `--fuse-gate-up-exps` layout (`ffn_gate_up_exps`, gate rows first); the
    cache stores MXFP4-sourced experts as bfloat16 (exactly: the parity test compares them)."""
    hf_model, gguf_path, _ = gpt_oss
    write_gpt_oss_gguf(tmp_path / "fused.gguf", hf_model, fused=True)
    separate_source = open_model_source(gguf_path, "float32", cache_dir=tmp_path / "a")
    separate = dict(separate_source.weights())
    fused = dict(open_model_source(tmp_path / "fused.gguf", "float32", cache_dir=tmp_path / "b").weights())
    assert fused.keys() == separate.keys()
    assert all(torch.equal(fused[name], tensor) for name, tensor in separate.items())
    with safe_open(str(separate_source.folder / "model.safetensors"), framework="pt") as f:
        stored = {name: f.get_slice(name).get_dtype() for name in separate}
    assert stored["model.layers.0.mlp.experts.3.down_proj.weight"] == "BF16"
    assert stored["model.layers.0.mlp.experts.3.down_proj.bias"] == stored["model.norm.weight"] == "F32"


def test_kept_quantization_leaves_stacked_experts_dense(gpt_oss, tmp_path: Path) -> None:
    """A GGUF's Q8_0 tensors are served as int8 by default, but only 2-D ones: Q8_0 experts
    (3-D) are served from the dequantized copy like MXFP4 ones."""
    hf_model, _, _ = gpt_oss
    path = tmp_path / "q8-experts.gguf"
    write_gpt_oss_gguf(path, hf_model, expert_type=gguf.GGMLQuantizationType.Q8_0)
    assert quantized_tensors(path, tmp_path / "kept") == {}
    weights = dict(open_model_source(path, "float32", cache_dir=tmp_path / "dense").weights())
    assert weights["model.layers.2.mlp.experts.1.up_proj.weight"].shape == (32, 64)


def test_o200k_pre_tokenizer(gpt_oss, tmp_path: Path) -> None:
    """gpt-oss's vocabulary names llama.cpp's `gpt-4o` pre-tokenizer: words keep their leading
    space and contraction, numbers split in threes, newlines apart."""
    _, gguf_path, _ = gpt_oss
    tokenizer = open_model_source(gguf_path, "auto", cache_dir=tmp_path).load_tokenizer()
    pieces = [p for p, _ in tokenizer.backend_tokenizer.pre_tokenizer.pre_tokenize_str("Hello World's 12345\n")]
    assert pieces == ["Hello", "ĠWorld's", "Ġ", "123", "45", "Ċ"]
    assert json.loads(tokenizer.backend_tokenizer.to_str())["pre_tokenizer"]["type"] == "Sequence"


@pytest.mark.parametrize(
    ("pattern", "sliding"),
    [
        (None, [True, False, True, False]),  # llama.cpp's default period for gpt-oss: 2
        (3, [True, True, False, True]),
        (0, [True] * 4),  # a period of 0: every layer slides
        ([False, True, True, False], [False, True, True, False]),  # per layer
    ],
)
def test_window_pattern_follows_llama_cpp(pattern, sliding: list[bool]) -> None:
    metadata = {"general.architecture": "gpt-oss"}
    if pattern is not None:
        metadata["gpt-oss.attention.sliding_window_pattern"] = pattern
    gf = GGUFFile(Path("m.gguf"), metadata, {})
    expected = ["sliding_attention" if s else "full_attention" for s in sliding]
    assert window_layer_types(gf, 4, ARCHITECTURES["gpt-oss"].window_period) == expected
