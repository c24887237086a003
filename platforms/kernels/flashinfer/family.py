"""The flashinfer family: FlashInfer's CUDA kernels (PyPI `flashinfer-python`, import `flashinfer`).

Attention plans FlashInfer's paged prefill/decode wrappers once per step from the token-level
metadata (NHD pages viewed from the default KV layout) and has graph-capture hooks for decode.
FlashInfer's kernels need an sm75+ GPU; its attention kernels take fp16/bf16 only and head dims
64/128/256 (its JIT build offers more, not relied on here).

Decode runs on one of two paths, fixed when the wrapper is built (`use_tensor_cores`). The
CUDA-core kernels are instantiated per GQA group size: `DISPATCH_GQA_GROUP_SIZE`
(include/flashinfer/utils.cuh, used by csrc/batch_decode.cu's plan) takes groups 1, 2, 3, 4 and
8 in every release to 0.6.17 and raises "Unsupported group_size" for any other, at the first
plan. The tensor-core path runs the prefill kernels, which take any group. Groups above 4 decode
on tensor cores: that covers 5, 6, 7 and 16 (Qwen2.5-7B is 28/4 = 7), and is upstream SGLang's
own rule for fp16/bf16 (`should_use_tensor_core` in its flashinfer backend: "group size > 4").

MLA (`mla_backend`) runs `BatchMLAPagedAttentionWrapper` (flashinfer/mla/_core.py) in the
absorbed form, fp16/bf16, over latent rows of `head_dim_ckv` 512 plus `head_dim_kpe` 64: the
DeepSeek V2/V3 shape and the only one FlashInfer's wheel prebuilds (flashinfer/aot.py); its head
dim, as op selection sees an MLA backend's, is the cached row's width, 576.
"""

import torch

from sglang.ops.selection import Candidate, Requirements, SelectionContext
from sglang.platforms.kernels.registry import KernelFamily

_HERE = "sglang.platforms.kernels.flashinfer"
_HALF = frozenset({torch.float16, torch.bfloat16})
_ANY_FLOAT = frozenset({torch.float32, torch.float16, torch.bfloat16})
_CAPABILITY = (7, 5)
_ELEMENTWISE = Requirements(dtypes=_HALF, packages=("flashinfer",), min_capability=_CAPABILITY)
_ATTENTION = Requirements(
    dtypes=_HALF, head_dims=frozenset({64, 128, 256}), packages=("flashinfer",), min_capability=(8, 0)
)
MLA_LATENT_DIM = 512
"""`head_dim_ckv`: the compressed-KV (latent) width FlashInfer's MLA modules are built for."""
MLA_KPE_DIM = 64
"""`head_dim_kpe`: the rotary key width beside it."""
_MLA = Requirements(
    dtypes=_HALF,
    head_dims=frozenset({MLA_LATENT_DIM + MLA_KPE_DIM}),
    packages=("flashinfer",),
    min_capability=(8, 0),
)
_SAMPLING = Requirements(dtypes=_ANY_FLOAT, packages=("flashinfer",), min_capability=_CAPABILITY)

CUDA_CORE_DECODE_GROUPS = frozenset({1, 2, 3, 4, 8})
"""GQA group sizes FlashInfer's CUDA-core decode dispatches (`DISPATCH_GQA_GROUP_SIZE`)."""
MAX_CUDA_CORE_GROUP = 4
"""Larger groups decode on tensor cores; every group up to this one is in the set above."""


def decode_on_tensor_cores(gqa_group: int) -> bool:
    """Whether the decode wrapper for query heads / KV heads = `gqa_group` uses tensor cores."""
    return gqa_group > MAX_CUDA_CORE_GROUP


def decode_path(ctx: SelectionContext) -> str | None:
    """`sglang ops`'s word on the decode path this model's GQA group takes."""
    group = ctx.gqa_ratio
    if group is None:
        return None
    if decode_on_tensor_cores(group):
        dispatched = ", ".join(map(str, sorted(CUDA_CORE_DECODE_GROUPS)))
        return f"decode on tensor cores: GQA group {group} (CUDA-core decode dispatches groups {dispatched})"
    return f"decode on CUDA cores: GQA group {group}"


def _candidate(op: str, qualname: str, requires: Requirements = _ELEMENTWISE) -> Candidate:
    return Candidate(op, "flashinfer", f"{_HERE}.{qualname}", requires=requires)


FAMILY = KernelFamily(
    name="flashinfer",
    description="FlashInfer: paged prefill/decode attention (NHD, graph-capturable decode), paged MLA "
    "(absorbed, 512 + 64 latent rows), RMSNorm, "
    "fused add RMSNorm, SiLU-and-mul, rotary from the cos/sin cache, top-k/top-p sampling",
    candidates=(
        Candidate(
            "attention_backend", "flashinfer", f"{_HERE}.attention:FlashInferAttention", _ATTENTION, path=decode_path
        ),
        Candidate("mla_backend", "flashinfer", f"{_HERE}.mla:FlashInferMLA", _MLA),
        _candidate("rms_norm", "norm:rms_norm"),
        _candidate("fused_add_rms_norm", "norm:fused_add_rms_norm"),
        _candidate("silu_and_mul", "activation:silu_and_mul"),
        _candidate("apply_rotary", "rotary:apply_rotary"),
        _candidate("sample", "sampling:sample", _SAMPLING),
    ),
)
