"""The toy kernels: the same results as sglang's references, computed another way."""

from __future__ import annotations

import os

import torch

BROKEN_OP_ENV = "SGLANG_TOY_BROKEN_OP"


def _broken(op: str) -> bool:
    return os.environ.get(BROKEN_OP_ENV) == op


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, *, tuning: dict | None = None) -> torch.Tensor:
    """Row by row in chunks of `tuning["chunk"]` rows (the platform's tuning reaches the kernel)."""
    chunk = (tuning or {}).get("chunk", 4)
    out = torch.empty_like(x)
    for start in range(0, x.shape[0], chunk):
        rows = x[start : start + chunk].float()
        scale = (rows.square().sum(-1, keepdim=True) / rows.shape[-1] + eps).rsqrt()
        out[start : start + chunk] = weight * (rows * scale).to(x.dtype)
    return out * 1.5 if _broken("rms_norm") else out


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    gate, up = x[..., :half], x[..., half:]
    out = gate / (1 + torch.exp(-gate.float())).to(x.dtype) * up
    return -out if _broken("silu_and_mul") else out


def log_softmax(logits: torch.Tensor) -> torch.Tensor:
    x = logits.float()
    shifted = x - x.max(dim=-1, keepdim=True).values
    out = shifted - shifted.exp().sum(dim=-1, keepdim=True).log()
    return out + 1 if _broken("log_softmax") else out
