"""The aiter family: AMD's AITER kernels on ROCm GPUs.

PyPI `amd-aiter` installs the import name `aiter`, which PyPI's unrelated asyncio package `aiter`
also takes: every candidate requires the submodule `aiter.ops`, which only AMD's package has, so
the asyncio package never makes a candidate eligible. AITER's attention and MoE kernels take
fp16/bf16; its decode kernel takes head dims 64 and 128 (and 256 on the ragged path), and pages
of at most 32 tokens that divide its 256-token partition (`paged_attention_ll4mi_QKV_mfma16_kernel`
asserts `BLOCK_SIZE <= 32` for 16-bit KV, csrc/cpp_itfs/pa/pa_kernels.cuh), so larger pools take
another family.
"""

import torch

from sglang.ops.selection import Candidate, Requirements
from sglang.platforms.kernels.registry import KernelFamily

_HERE = "sglang.platforms.kernels.aiter"
_HALF = frozenset({torch.float16, torch.bfloat16})
_AITER = ("aiter.ops",)
_NORM = Requirements(dtypes=_HALF, packages=_AITER)
_ATTENTION = Requirements(
    dtypes=_HALF,
    head_dims=frozenset({64, 128, 256}),
    page_sizes=frozenset({1, 2, 4, 8, 16, 32}),
    packages=_AITER,
)
_MOE = Requirements(dtypes=_HALF, packages=(*_AITER, "aiter.ops.shuffle", "aiter.fused_moe"))

FAMILY = KernelFamily(
    name="aiter",
    description="AITER: ragged paged decode, varlen extend attention, rmsnorm2d (plain and fused add), "
    "fused MoE over weights shuffled once",
    candidates=(
        Candidate("attention_backend", "aiter", f"{_HERE}.attention:AiterAttention", requires=_ATTENTION),
        Candidate("rms_norm", "aiter", f"{_HERE}.norm:rms_norm", requires=_NORM),
        Candidate("fused_add_rms_norm", "aiter", f"{_HERE}.norm:fused_add_rms_norm", requires=_NORM),
        Candidate("moe_experts", "aiter", f"{_HERE}.moe:moe_experts", requires=_MOE),
    ),
)
