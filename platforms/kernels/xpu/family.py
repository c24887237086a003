"""The ipex family (in platforms/kernels/xpu): Intel GPU kernels from `intel_extension_for_pytorch`.

Only the fused norm and gated activation are taken from IPEX (`ipex.llm.functional`); attention
on xpu comes from the Triton family (Intel's Triton build) and then torch_native. vLLM's
`vllm-xpu-kernels` is not wired here.
"""

import torch

from sglang.ops.selection import Candidate, Requirements
from sglang.platforms.kernels.registry import KernelFamily

_HERE = "sglang.platforms.kernels.xpu"
_IPEX = Requirements(
    dtypes=frozenset({torch.float32, torch.float16, torch.bfloat16}),
    packages=("intel_extension_for_pytorch",),
)

FAMILY = KernelFamily(
    name="ipex",
    description="Intel IPEX: ipex.llm.functional rms_norm and silu_mul",
    candidates=(
        Candidate("rms_norm", "ipex", f"{_HERE}.ipex_ops:rms_norm", requires=_IPEX),
        Candidate("silu_and_mul", "ipex", f"{_HERE}.ipex_ops:silu_and_mul", requires=_IPEX),
    ),
)
