"""The torch_npu family: Ascend NPU fused operators exposed by `torch_npu`.

`npu_fused_infer_attention_score` reads paged KV through a block table with host sequence
lengths; its inputs are fp16/bf16 and head dims are multiples of 16 up to 512. Its prefill
branch (several query tokens) takes blocks of 128 to 512 tokens in steps of 128 when it reads a
block table (its decode branch takes any block up to 512), so those are the page sizes declared.
The MoE chain (gating top-k, init routing, grouped matmul, finalize routing) takes
fp16/bf16/fp32.
"""

import torch

from sglang.ops.selection import Candidate, Requirements
from sglang.platforms.kernels.registry import KernelFamily

_HERE = "sglang.platforms.kernels.torch_npu"
_HALF = frozenset({torch.float16, torch.bfloat16})
_FLOATS = frozenset({torch.float32, *_HALF})
_FLOAT_INPUTS = Requirements(dtypes=_FLOATS, packages=("torch_npu",))
_ATTENTION = Requirements(
    dtypes=_HALF,
    head_dims=frozenset(range(16, 513, 16)),
    page_sizes=frozenset(range(128, 513, 128)),
    packages=("torch_npu",),
)

FAMILY = KernelFamily(
    name="torch_npu",
    description="torch_npu: fused infer attention over a block table, npu_rms_norm, npu_add_rms_norm, npu_swiglu, "
    "MoE gating top-k and the init routing / grouped matmul / finalize routing chain",
    candidates=(
        Candidate("attention_backend", "torch_npu", f"{_HERE}.attention:NpuAttention", requires=_ATTENTION),
        Candidate("rms_norm", "torch_npu", f"{_HERE}.norm:rms_norm", requires=_FLOAT_INPUTS),
        Candidate("fused_add_rms_norm", "torch_npu", f"{_HERE}.norm:fused_add_rms_norm", requires=_FLOAT_INPUTS),
        Candidate("silu_and_mul", "torch_npu", f"{_HERE}.activation:silu_and_mul", requires=_FLOAT_INPUTS),
        Candidate("moe_route", "torch_npu", f"{_HERE}.moe:moe_route", requires=_FLOAT_INPUTS),
        Candidate("moe_experts", "torch_npu", f"{_HERE}.moe:moe_experts", requires=_FLOAT_INPUTS),
    ),
)
