"""A recording stand-in of `intel_extension_for_pytorch.llm.functional` (rms_norm, silu_mul)."""

from __future__ import annotations

import torch.nn.functional as F

from sglang.ops.norm import rms_norm as reference_rms_norm

from .standin import Recorder, expect, module


def build(recorder: Recorder) -> dict:
    def rms_norm(hidden_states, weight, eps):
        recorder.record("llm.functional.rms_norm", eps=eps)
        return reference_rms_norm(hidden_states, weight, eps)

    def silu_mul(x, y, out=None):
        expect(x.shape == y.shape and x.is_contiguous() and y.is_contiguous(), "gate and up: same shape, contiguous")
        recorder.record("llm.functional.silu_mul")
        return F.silu(x) * y

    functional = module("intel_extension_for_pytorch.llm.functional", rms_norm=rms_norm, silu_mul=silu_mul)
    llm = module("intel_extension_for_pytorch.llm", functional=functional)
    root = module("intel_extension_for_pytorch", llm=llm)
    return {
        "intel_extension_for_pytorch": root,
        "intel_extension_for_pytorch.llm": llm,
        "intel_extension_for_pytorch.llm.functional": functional,
    }
