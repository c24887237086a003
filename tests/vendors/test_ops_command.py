"""`sglang ops --device cuda|rocm|xpu|npu` (declared, on a machine without those devices): the
candidate each op takes with every vendor package present, and with it assumed missing."""

from __future__ import annotations

import json
import pathlib
import re

import pytest

from sglang.cli import main

# op -> family, per device, for the embedded model (bf16, head dim 64, 9/3 heads, page size 1).
PRESENT = {
    "cuda": {
        "attention_backend": "flashinfer",
        "rms_norm": "flashinfer",
        "silu_and_mul": "flashinfer",
        "apply_rotary": "flashinfer",
        "sample": "flashinfer",
        "store_kv": "triton",
    },
    "rocm": {
        "attention_backend": "aiter",
        "rms_norm": "aiter",
        "fused_add_rms_norm": "aiter",
        "moe_experts": "aiter",
        "silu_and_mul": "triton",
    },
    "npu": {
        "rms_norm": "torch_npu",
        "fused_add_rms_norm": "torch_npu",
        "silu_and_mul": "torch_npu",
        "moe_route": "torch_npu",
        "moe_experts": "torch_npu",
        "attention_backend": "torch_native",
    },
    "xpu": {"rms_norm": "ipex", "silu_and_mul": "ipex", "attention_backend": "triton"},
}
VENDOR = {"cuda": "flashinfer", "rocm": "aiter", "npu": "torch_npu", "xpu": "intel_extension_for_pytorch"}
FALLBACK = {"cuda": "triton", "rocm": "triton", "npu": "torch_native", "xpu": "triton"}


def _table(capsys, device: str, *extra: str) -> dict[str, dict]:
    assert main(["ops", "--device", device, "--dtype", "bfloat16", "--json", *extra]) == 0
    return {row["op"]: row for row in json.loads(capsys.readouterr().out)["ops"]}


@pytest.mark.parametrize("device", list(PRESENT))
def test_vendor_present_and_missing(device: str, capsys) -> None:
    present = _table(capsys, device)
    for op, family in PRESENT[device].items():
        assert present[op]["family"] == family, f"{device} {op}"
    missing = _table(capsys, device, "--assume-missing", VENDOR[device])
    vendor_family = present["rms_norm"]["family"]
    for op, row in missing.items():
        assert row["family"] != vendor_family, f"{device} {op} still takes {vendor_family}"
        if present[op]["family"] == vendor_family:
            reason = next(r["reason"] for r in row["rejected"] if r["family"] == vendor_family)
            assert "not importable" in reason, reason
    assert missing["rms_norm"]["family"] == FALLBACK[device]


def test_npu_attention_needs_pages_of_128(capsys) -> None:
    """The operator's prefill branch reads a block table only in blocks of 128 to 512 tokens in
    steps of 128: other page sizes fall back, and say why."""
    for page_size in ("1", "16"):
        row = _table(capsys, "npu", "--page-size", page_size)["attention_backend"]
        reason = next(r["reason"] for r in row["rejected"] if r["family"] == "torch_npu")
        assert f"page size {page_size} not supported" in reason
    assert _table(capsys, "npu", "--page-size", "128")["attention_backend"]["family"] == "torch_npu"


def test_xpu_attention_needs_pages_of_16_or_32(capsys) -> None:
    """IPEX's paged decode kernel takes blocks of 16 or 32 tokens: page size 1 goes to Triton."""
    row = _table(capsys, "xpu")["attention_backend"]
    reason = next(r["reason"] for r in row["rejected"] if r["family"] == "ipex")
    assert "page size 1 not supported" in reason
    for page_size in ("16", "32"):
        assert _table(capsys, "xpu", "--page-size", page_size)["attention_backend"]["family"] == "ipex"
    missing = _table(capsys, "xpu", "--page-size", "16", "--assume-missing", "intel_extension_for_pytorch")
    assert missing["attention_backend"]["family"] == "triton"
    fp32 = _table(capsys, "xpu", "--page-size", "16", "--dtype", "float32")["attention_backend"]
    assert fp32["family"] == "triton"
    assert "dtype float32 not supported" in next(r["reason"] for r in fp32["rejected"] if r["family"] == "ipex")


QWEN2_5_7B_CONFIG = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_hidden_layers": 28,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "vocab_size": 152064,
    "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "torch_dtype": "bfloat16",
}
"""Qwen2.5-7B's config.json shape (28 heads over 4 KV heads: GQA group 7, head dim 128)."""


def test_plans_from_a_config_alone_and_says_the_decode_path(tmp_path, capsys) -> None:
    """A folder with only config.json plans (no weights are read). A Qwen2.5-7B-shaped model
    (28 heads over 4 KV heads, head dim 128) takes flashinfer, which says it decodes on tensor
    cores because CUDA-core decode has no group 7; group 2 says CUDA cores."""
    config = QWEN2_5_7B_CONFIG
    (tmp_path / "config.json").write_text(json.dumps(config))
    row = _table(capsys, "cuda", "--model-path", str(tmp_path))["attention_backend"]
    assert row["family"] == "flashinfer"
    assert row["path"].startswith("decode on tensor cores: GQA group 7"), row["path"]
    (tmp_path / "config.json").write_text(json.dumps({**config, "num_key_value_heads": 14}))
    row = _table(capsys, "cuda", "--model-path", str(tmp_path))["attention_backend"]
    assert row["path"] == "decode on CUDA cores: GQA group 2"
    assert main(["ops", "--device", "cuda", "--model-path", str(tmp_path)]) == 0
    assert "decode on CUDA cores" in capsys.readouterr().out


@pytest.mark.parametrize("missing", [(), ("--assume-missing", "flashinfer")], ids=["declared", "no_flashinfer"])
def test_device_script_accepts_the_qwen7b_attention_row(missing: tuple[str, ...], tmp_path, capsys) -> None:
    """ci/device_matrix.sh's `ops_qwen7b_config` step greps the attention row for the decode path
    or flashinfer's reason for losing. The GPU machine has cuda but not flashinfer (its wheel is
    not carried), so there the row says why flashinfer lost; a step that only accepted the
    tensor-core path failed there, while the dry run here (cuda declared) passed."""
    script = (pathlib.Path(__file__).parents[2] / "ci" / "device_matrix.sh").read_text()
    pattern = re.search(r"^QWEN7B_ATTENTION='([^']+)'$", script, re.MULTILINE).group(1)
    (tmp_path / "config.json").write_text(json.dumps(QWEN2_5_7B_CONFIG))
    assert main(["ops", "--device", "cuda", "--model-path", str(tmp_path), *missing]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("attention_backend ")]
    assert len(rows) == 1 and re.search(pattern, rows[0]), rows


DEEPSEEK_V2_LITE_CONFIG = {
    "architectures": ["DeepseekV2ForCausalLM"],
    "model_type": "deepseek_v2",
    "hidden_size": 2048,
    "intermediate_size": 10944,
    "moe_intermediate_size": 1408,
    "num_hidden_layers": 27,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "vocab_size": 102400,
    "kv_lora_rank": 512,
    "q_lora_rank": None,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "n_routed_experts": 64,
    "num_experts_per_tok": 6,
    "n_shared_experts": 2,
    "first_k_dense_replace": 1,
    "max_position_embeddings": 163840,
    "rms_norm_eps": 1e-6,
    "torch_dtype": "bfloat16",
}
"""DeepSeek-V2-Lite's config.json shape: MLA rows of 512 latent + 64 rotary values."""


def test_mla_row_width_decides_flashinfer_mla(tmp_path, capsys) -> None:
    """Op selection sees an MLA model's head dim as its cached row width (512 + 64 = 576, not the
    rotary head dim 64): DeepSeek's widths take FlashInfer's MLA (declared: never run here), other
    widths are refused with the reason."""
    (tmp_path / "config.json").write_text(json.dumps(DEEPSEEK_V2_LITE_CONFIG))
    assert _table(capsys, "cuda", "--model-path", str(tmp_path))["mla_backend"]["family"] == "flashinfer"
    (tmp_path / "config.json").write_text(json.dumps({**DEEPSEEK_V2_LITE_CONFIG, "kv_lora_rank": 256}))
    row = _table(capsys, "cuda", "--model-path", str(tmp_path))["mla_backend"]
    assert row["family"] == "triton"
    reason = next(r["reason"] for r in row["rejected"] if r["family"] == "flashinfer")
    assert "head dim 320 not supported" in reason, reason


def test_mla_heads_per_rank_decide_aiter_mla(tmp_path, capsys) -> None:
    """An MLA model has one KV head (not the config's `num_key_value_heads`), so its query heads
    per rank are what AITER's MLA kernels are chosen by: V2-Lite's 16 take aiter (declared: never
    run here), decoding through AITER and extending through SDPA; 4 heads have no AITER kernel."""
    from sglang.runtime.models.config import ModelConfig

    assert ModelConfig.from_dict(DEEPSEEK_V2_LITE_CONFIG).attention_kv_heads == 1
    (tmp_path / "config.json").write_text(json.dumps(DEEPSEEK_V2_LITE_CONFIG))
    row = _table(capsys, "rocm", "--model-path", str(tmp_path))["mla_backend"]
    assert (row["family"], row["path"]) == ("aiter", "decode: aiter mla_decode_fwd; extend: SDPA")
    few = {**DEEPSEEK_V2_LITE_CONFIG, "num_attention_heads": 4, "num_key_value_heads": 4}
    (tmp_path / "config.json").write_text(json.dumps(few))
    row = _table(capsys, "rocm", "--model-path", str(tmp_path))["mla_backend"]
    assert row["family"] == "triton"
    reason = next(r["reason"] for r in row["rejected"] if r["family"] == "aiter")
    assert "GQA ratio 4 not supported" in reason, reason
