"""The flashinfer family: FlashInfer's CUDA kernels (PyPI `flashinfer-python`, import `flashinfer`).

Attention plans FlashInfer's paged prefill/decode wrappers once per step from the token-level
metadata (NHD pages viewed from the default KV layout) and has graph-capture hooks for decode.
FlashInfer's kernels need an sm75+ GPU; its attention kernels take fp16/bf16 only and head dims
64/128/256 (its JIT build offers more, not relied on here).
"""

import torch

from sglang.ops.selection import Candidate, Requirements
from sglang.platforms.kernels.registry import KernelFamily

_HERE = "sglang.platforms.kernels.flashinfer"
_HALF = frozenset({torch.float16, torch.bfloat16})
_ANY_FLOAT = frozenset({torch.float32, torch.float16, torch.bfloat16})
_CAPABILITY = (7, 5)
_ELEMENTWISE = Requirements(dtypes=_HALF, packages=("flashinfer",), min_capability=_CAPABILITY)
_ATTENTION = Requirements(
    dtypes=_HALF, head_dims=frozenset({64, 128, 256}), packages=("flashinfer",), min_capability=(8, 0)
)
_SAMPLING = Requirements(dtypes=_ANY_FLOAT, packages=("flashinfer",), min_capability=_CAPABILITY)


def _candidate(op: str, qualname: str, requires: Requirements = _ELEMENTWISE) -> Candidate:
    return Candidate(op, "flashinfer", f"{_HERE}.{qualname}", requires=requires)


FAMILY = KernelFamily(
    name="flashinfer",
    description="FlashInfer: paged prefill/decode attention (NHD, graph-capturable decode), RMSNorm, "
    "fused add RMSNorm, SiLU-and-mul, rotary from the cos/sin cache, top-k/top-p sampling",
    candidates=(
        _candidate("attention_backend", "attention:FlashInferAttention", _ATTENTION),
        _candidate("rms_norm", "norm:rms_norm"),
        _candidate("fused_add_rms_norm", "norm:fused_add_rms_norm"),
        _candidate("silu_and_mul", "activation:silu_and_mul"),
        _candidate("apply_rotary", "rotary:apply_rotary"),
        _candidate("sample", "sampling:sample", _SAMPLING),
    ),
)
