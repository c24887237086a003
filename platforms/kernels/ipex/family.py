"""The ipex family: Intel GPU kernels from `intel_extension_for_pytorch`.

Paged attention (`attention:IpexPagedAttention`: IPEX's paged decode kernel, `reshape_and_cache`,
varlen attention for extends), RMSNorm and SiLU-and-mul (`ipex.llm.functional`). The adapters
call IPEX's GPU kernels, whose layouts differ from its CPU ones, so only the xpu platform lists
this family; the package requirement keeps it off when IPEX does not import. Attention needs
fp16/bf16, blocks of 16 or 32 tokens and a head dim of 64, 128 or 256 (the decode kernel is
compiled for blocks of 16/32 and head-dim tiers up to 64, 128 and 256; narrower heads would run
padded inside a tier, untested upstream, so they are not declared). Where attention is not
eligible, the xpu platform's next families serve it.
"""

import torch

from sglang.ops.selection import Candidate, Requirements
from sglang.platforms.kernels.registry import KernelFamily

_HERE = "sglang.platforms.kernels.ipex"
_PACKAGE = ("intel_extension_for_pytorch",)
_IPEX = Requirements(dtypes=frozenset({torch.float32, torch.float16, torch.bfloat16}), packages=_PACKAGE)
_ATTENTION = Requirements(
    dtypes=frozenset({torch.float16, torch.bfloat16}),
    head_dims=frozenset({64, 128, 256}),
    page_sizes=frozenset({16, 32}),
    packages=_PACKAGE,
)

FAMILY = KernelFamily(
    name="ipex",
    description="Intel IPEX: paged decode attention over a block table, varlen extend attention, "
    "ipex.llm.functional rms_norm and silu_mul",
    candidates=(
        Candidate("attention_backend", "ipex", f"{_HERE}.attention:IpexPagedAttention", requires=_ATTENTION),
        Candidate("rms_norm", "ipex", f"{_HERE}.ipex_ops:rms_norm", requires=_IPEX),
        Candidate("silu_and_mul", "ipex", f"{_HERE}.ipex_ops:silu_and_mul", requires=_IPEX),
    ),
)
