"""The cpu_cpp family: C++ kernels for host tensors: weight-only int8/int4 groupwise linear,
paged decode attention that reads the KV pool in place (K/V, and MLA's latent in the absorbed
form), the small float32 ops around them (RMSNorm, rotary, SiLU-and-mul), which at decode cost
more through torch's dispatch than they compute, multi-adapter LoRA shrink/expand reading only
each row's own adapter, and greedy sampling's argmax.

The kernels are built once per machine and cached (see build.py) and take float32 activations, so
the family serves float32 models; other dtypes keep the next family's or the reference. Where they
fail to build (no compiler, no OpenMP), the probe makes every candidate ineligible with the
compiler's reason, and the next family serves.
"""

import torch

from sglang.ops.selection import Candidate, Requirements
from sglang.platforms.kernels.registry import KernelFamily

_HERE = "sglang.platforms.kernels.cpu_cpp"

WEIGHT_FORMATS = frozenset({"int4_g32", "int4_g64", "int4_g128", "int8_g32", "int8_g64", "int8_g128", "int8_channel"})
"""Quantized formats only: a dense model keeps torch's own linear; the dense layers of a quantized
model go through the candidate to torch's dense kernel."""

FAMILY = KernelFamily(
    name="cpu_cpp",
    probe=f"{_HERE}.build:build_failure",
    description="C++ host kernels (AVX2/FMA): int8/int4 weight linear (int16 activations at decode), "
    "in-place paged decode attention (K/V and MLA's latent), RMSNorm, rotary, SiLU-and-mul, "
    "LoRA shrink/expand, argmax; float32",
    candidates=(
        Candidate(
            "linear",
            "cpu_cpp",
            f"{_HERE}.linear:linear",
            Requirements(dtypes=frozenset({torch.float32}), weight_formats=WEIGHT_FORMATS),
        ),
        Candidate(
            "attention_backend",
            "cpu_cpp",
            f"{_HERE}.attention:PoolDecodeAttention",
            # Its decode kernel takes the sinks; extend rows take the SDPA path it extends.
            Requirements(dtypes=frozenset({torch.float32}), features=frozenset({"sinks"})),
        ),
        Candidate(
            "mla_backend", "cpu_cpp", f"{_HERE}.mla:PoolDecodeMLA", Requirements(dtypes=frozenset({torch.float32}))
        ),
        *(
            Candidate(op, "cpu_cpp", f"{_HERE}.elementwise:{op}", Requirements(dtypes=frozenset({torch.float32})))
            for op in ("rms_norm", "fused_add_rms_norm", "apply_rotary", "silu_and_mul")
        ),
        *(
            Candidate(op, "cpu_cpp", f"{_HERE}.lora:{op}", Requirements(dtypes=frozenset({torch.float32})))
            for op in ("lora_shrink", "lora_expand")
        ),
        Candidate("argmax", "cpu_cpp", f"{_HERE}.sampling:argmax", Requirements(dtypes=frozenset({torch.float32}))),
    ),
)
