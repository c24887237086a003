"""The triton family: one kernel source for cuda, rocm and xpu (Intel's Triton build).

Candidates take the platform's `TritonTuning` (`tunable`). Their modules import triton, so they
load only when bound or tested; this declaration imports on any machine.
"""

import torch

from sglang.ops.selection import Candidate, Requirements
from sglang.platforms.kernels.registry import KernelFamily

_HERE = "sglang.platforms.kernels.triton"
_FLOATS = frozenset({torch.float32, torch.float16, torch.bfloat16})
_TRITON = Requirements(dtypes=_FLOATS, packages=("triton",))
# Head dims pad to a power of two >= 16 inside the kernels (masked); past 256 the tiles no longer
# fit in registers.
_ATTENTION = Requirements(
    dtypes=_FLOATS, packages=("triton",), head_dims=frozenset(range(16, 257, 16)), features=frozenset({"sinks"})
)

# Experts with biases and gpt-oss's clamped SwiGLU are fused into the grouped GEMMs.
_MOE = Requirements(dtypes=_FLOATS, packages=("triton",), features=frozenset({"expert_bias"}))


def _candidate(op: str, qualname: str, requires: Requirements = _TRITON) -> Candidate:
    return Candidate(op, "triton", f"{_HERE}.{qualname}", requires=requires, tunable=True)


FAMILY = KernelFamily(
    name="triton",
    description="Triton kernels: paged decode/extend attention, MLA decode over the latent pool, KV store, "
    "norms, rotary, gated MLP, MoE (biased experts too), multi-LoRA",
    candidates=(
        _candidate("attention_backend", "attention:TritonAttention", _ATTENTION),
        _candidate("mla_backend", "mla:TritonMLA"),
        _candidate("store_kv", "kv_store:store_kv"),
        _candidate("rms_norm", "norm:rms_norm"),
        _candidate("fused_add_rms_norm", "norm:fused_add_rms_norm"),
        _candidate("apply_rotary", "rotary:apply_rotary"),
        _candidate("silu_and_mul", "activation:silu_and_mul"),
        _candidate("gelu_and_mul", "activation:gelu_and_mul"),
        _candidate("moe_experts", "moe:moe_experts", _MOE),
        _candidate("lora_shrink", "lora:lora_shrink"),
        _candidate("lora_expand", "lora:lora_expand"),
    ),
)
