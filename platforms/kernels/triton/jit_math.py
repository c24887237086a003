"""Device-side math shared by the kernels, written in core `tl` only.

`tl` has no tanh that every backend (nvidia, amd, Intel) lowers the same way, so it is built
from `tl.sigmoid`; every helper takes and returns float32 tensors.

Dot precision, in every kernel: `tl.dot` takes its operands in the tensors' own dtype and
accumulates in float32. fp16/bf16 operands run on the tensor cores (NVIDIA's MMA, AMD's MFMA)
as the device takes them; softmax probabilities are rounded to the value dtype before `P @ V`,
as flash attention does. fp32 operands are multiplied exactly: `input_precision="ieee"`, which
applies to fp32 operands only, keeps an fp32 model off TF32, so it matches its fp32 reference.
"""

import triton
import triton.language as tl

from sglang.ops import activation

SWIGLU_ALPHA = tl.constexpr(activation.SWIGLU_ALPHA)
SWIGLU_LIMIT = tl.constexpr(activation.SWIGLU_LIMIT)


@triton.jit
def tanh(x):
    # tanh(x) = 2 * sigmoid(2x) - 1: saturates to +-1 without overflow (exp(-2x) -> inf gives 0).
    return 2.0 * tl.sigmoid(2.0 * x) - 1.0


@triton.jit
def soft_cap(scores, cap):
    """`cap * tanh(scores / cap)`: Gemma-style attention logit soft-capping."""
    return cap * tanh(scores / cap)


@triton.jit
def gated(gate, up, ACTIVATION: tl.constexpr):
    """`act(gate) * up` for ACTIVATION "silu" or "gelu_tanh" (GELU's tanh approximation);
    "swigluoai" is gpt-oss's clamped SwiGLU (`ops.activation.clamped_swiglu_and_mul`)."""
    if ACTIVATION == "silu":
        act = gate * tl.sigmoid(gate)
    elif ACTIVATION == "swigluoai":
        gate = tl.minimum(gate, SWIGLU_LIMIT)
        up = tl.minimum(tl.maximum(up, -SWIGLU_LIMIT), SWIGLU_LIMIT) + 1.0
        act = gate * tl.sigmoid(gate * SWIGLU_ALPHA)
    else:
        inner = 0.7978845608028654 * (gate + 0.044715 * gate * gate * gate)  # sqrt(2 / pi)
        act = 0.5 * gate * (1.0 + tanh(inner))
    return act * up


ACTIVATIONS = {"silu": "silu", "gelu_pytorch_tanh": "gelu_tanh", "swigluoai": "swigluoai"}
"""A config's `hidden_act` -> the ACTIVATION name `gated` takes."""
