"""`--kv-cache-dtype`: which pool dtype each name gives an attention backend, and the refusals.

A backend reads a pool of another dtype than its model's only where it declares it
(`AttentionBackend.kv_cache_dtypes`); every other name is refused before a pool is allocated, with
the backend's name and the dtypes it reads. What a bfloat16 pool computes is checked against
torch_native in tests/ops/test_cpu_decode_attention.py and through captured steps of the embedded
model in tests/runtime/test_cpu_captured_decode.py.
"""

from __future__ import annotations

import argparse

import pytest
import torch

from sglang.ops.attention import ReferenceAttention
from sglang.ops.mla import ReferenceMLA
from sglang.platforms.kernels.cpu_cpp.attention import PoolDecodeAttention
from sglang.platforms.kernels.torch_native.attention import SdpaAttention
from sglang.runtime.memory.kv_dtype import KV_CACHE_DTYPES, kv_pool_dtype
from sglang.runtime.processes.launch import EngineStartError
from sglang.runtime.server_args import ServerArgs

CPU = torch.device("cpu")


@pytest.mark.parametrize("backend_class", [ReferenceAttention, SdpaAttention, PoolDecodeAttention])
def test_bfloat16_pools_on_the_cpu_backends(backend_class: type) -> None:
    backend = backend_class(9, 3, 64, torch.float32, CPU)
    assert kv_pool_dtype("auto", backend) == torch.float32
    assert kv_pool_dtype("bf16", backend) == kv_pool_dtype("bfloat16", backend) == torch.bfloat16
    full = backend.kv_bytes_per_token()
    backend.kv_dtype = torch.bfloat16
    assert backend.kv_bytes_per_token() * 2 == full == 2 * 3 * 64 * 4


@pytest.mark.parametrize("name", ["fp8_e4m3", "fp8_e5m2"])
def test_a_dtype_the_backend_does_not_declare_is_refused_with_what_it_reads(name: str) -> None:
    reason = f"--kv-cache-dtype {name}: SdpaAttention reads a KV pool of float32 or bfloat16 only"
    with pytest.raises(ValueError, match=reason):
        kv_pool_dtype(name, SdpaAttention(9, 3, 64, torch.float32, CPU))


def test_a_backend_without_declarations_keeps_its_models_dtype() -> None:
    latent = ReferenceMLA(4, 32, 16, torch.float32, CPU)
    assert kv_pool_dtype("auto", latent) == torch.float32
    with pytest.raises(ValueError, match="ReferenceMLA reads a KV pool of float32 only"):
        kv_pool_dtype("bf16", latent)
    # The model's own dtype by name is no conversion, so every backend takes it.
    assert kv_pool_dtype("bf16", ReferenceMLA(4, 32, 16, torch.bfloat16, CPU)) == torch.bfloat16


def test_mxfp4_is_refused_with_its_reason() -> None:
    with pytest.raises(ValueError, match="fp4_e2m1: an mxfp4 pool keeps a scale per block"):
        kv_pool_dtype("fp4_e2m1", ReferenceAttention(9, 3, 64, torch.float32, CPU))


def test_the_flag_takes_upstreams_names_only() -> None:
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    assert ServerArgs.from_cli_args(parser.parse_args([])).kv_cache_dtype == "auto"
    for name in KV_CACHE_DTYPES:
        assert ServerArgs.from_cli_args(parser.parse_args(["--kv-cache-dtype", name])).kv_cache_dtype == name
    with pytest.raises(SystemExit):
        parser.parse_args(["--kv-cache-dtype", "fp16"])
    with pytest.raises(ValueError, match="--kv-cache-dtype fp16: not one of auto, bf16"):
        kv_pool_dtype("fp16", ReferenceAttention(9, 3, 64, torch.float32, CPU))


def test_a_server_refuses_it_at_startup_with_the_reason(embedded_model) -> None:
    from sglang.runtime.engine import Engine

    reason = "--kv-cache-dtype fp8_e4m3: PoolDecodeAttention reads a KV pool of float32 or bfloat16 only"
    with pytest.raises(EngineStartError, match=reason):
        Engine(device="cpu", kv_cache_dtype="fp8_e4m3", max_total_tokens=1024, log_level="error")
