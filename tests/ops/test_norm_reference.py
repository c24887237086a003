"""The RMSNorm references against transformers' `LlamaRMSNorm`, an independent implementation."""

from __future__ import annotations

import pytest
import torch
from transformers.models.llama.modeling_llama import LlamaRMSNorm

from sglang.ops.norm import fused_add_rms_norm, rms_norm


def hf_norm(weight: torch.Tensor, eps: float) -> LlamaRMSNorm:
    norm = LlamaRMSNorm(weight.shape[0], eps=eps).to(weight.dtype)
    with torch.no_grad():
        norm.weight.copy_(weight)
    return norm


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_rms_norm_matches_llama(dtype: torch.dtype) -> None:
    x = (torch.randn(5, 48) * 4).to(dtype)
    weight = (1 + torch.randn(48) * 0.1).to(dtype)
    out = rms_norm(x, weight, 1e-5)
    assert out.dtype == dtype
    with torch.no_grad():
        expected = hf_norm(weight, 1e-5)(x)
    torch.testing.assert_close(out, expected, atol=0, rtol=0)


def test_fused_add_returns_norm_of_sum_and_the_sum() -> None:
    x, residual, weight = torch.randn(3, 16), torch.randn(3, 16), torch.rand(16) + 0.5
    normed, summed = fused_add_rms_norm(x, residual, weight, 1e-6)
    torch.testing.assert_close(summed, x + residual, atol=0, rtol=0)
    with torch.no_grad():
        torch.testing.assert_close(normed, hf_norm(weight, 1e-6)(x + residual))
