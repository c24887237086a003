"""The torch_native family: fused torch kernels (SDPA, torch's RMSNorm) and a sparse MoE.

Every platform may list it: the code is plain torch, so it serves cpu and is the fallback on
accelerators. The sparse MoE reads expert counts on the host, which a jitted or captured step
cannot do; platforms that need static shapes simply do not list this family first.
"""

from sglang.ops.selection import Candidate, Requirements
from sglang.platforms.kernels.registry import KernelFamily

_HERE = "sglang.platforms.kernels.torch_native"

FAMILY = KernelFamily(
    name="torch_native",
    description="torch's fused kernels (SDPA attention, absorbed MLA, RMSNorm), a sparse MoE, multi-LoRA GEMMs; any "
    "torch device",
    candidates=(
        Candidate(
            "attention_backend",
            "torch_native",
            f"{_HERE}.attention:SdpaAttention",
            Requirements(features=frozenset({"sinks"})),
        ),
        Candidate("mla_backend", "torch_native", f"{_HERE}.mla:AbsorbedMLA"),
        Candidate("rms_norm", "torch_native", f"{_HERE}.norm:rms_norm"),
        Candidate("fused_add_rms_norm", "torch_native", f"{_HERE}.norm:fused_add_rms_norm"),
        Candidate(
            "moe_experts", "torch_native", f"{_HERE}.moe:moe_experts", Requirements(features=frozenset({"expert_bias"}))
        ),
        Candidate("lora_shrink", "torch_native", f"{_HERE}.lora:lora_shrink"),
        Candidate("lora_expand", "torch_native", f"{_HERE}.lora:lora_expand"),
    ),
)
