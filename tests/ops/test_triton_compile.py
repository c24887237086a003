"""Every Triton kernel launch the parity cases make, compiled offline for real GPU targets.

The interpreter runs kernels as Python, so it cannot see what only the compiler rejects (dot
shapes under 16, type mismatches across branches, unsupported constructs). Here the wrappers run
on cpu tensors with launching replaced by recording, and each distinct launch (kernel, argument
types, constexprs other than block sizes) goes through Triton's whole pipeline for an NVIDIA
sm_90 and an AMD gfx942 target, down to the binary (ptxas / the AMDGPU linker ship with the
wheel). No GPU is needed, and none is claimed: this proves the kernels compile, not that they
compute correctly there.
"""

from __future__ import annotations

import os
import zlib

import pytest
import torch

from sglang.ci.suites.devices import to_device
from sglang.ci.suites.op_cases import CASES
from sglang.ops.binding import load
from sglang.ops.selection import SelectionContext, ineligibility
from sglang.platforms.kernels.triton.family import FAMILY

triton = pytest.importorskip("triton")
pytestmark = [
    # About a minute of CPU for both targets (Triton caches the binaries afterwards): in the default
    # run, because nothing else compiles the kernels for a real GPU target before a GPU run does.
    pytest.mark.skipif(
        os.environ.get("TRITON_INTERPRET", "") == "1", reason="under TRITON_INTERPRET=1 kernels are not compiled"
    ),
]

from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402
from triton.runtime.jit import JITFunction  # noqa: E402

TARGETS = {"cuda-sm90": GPUTarget("cuda", 90, 32), "hip-gfx942": GPUTarget("hip", "gfx942", 64)}
TYPE_NAMES = {
    torch.float32: "fp32",
    torch.float16: "fp16",
    torch.bfloat16: "bf16",
    torch.int32: "i32",
    torch.int64: "i64",
}


def _signature(fn: JITFunction, bound: dict) -> tuple[dict, dict]:
    signature, constexprs = {}, {}
    for index, name in enumerate(fn.arg_names):
        value = bound[name]
        if index in fn.constexprs:
            signature[name], constexprs[name] = "constexpr", value
        elif isinstance(value, torch.Tensor):
            signature[name] = "*" + TYPE_NAMES[value.dtype]
        elif isinstance(value, bool):
            signature[name] = "i1"
        elif isinstance(value, int):
            signature[name] = "i32" if -(2**31) <= value < 2**31 else "i64"
        else:
            signature[name] = "fp32"
    return signature, constexprs


@pytest.fixture(scope="module")
def launches() -> list[tuple[JITFunction, dict, dict, dict]]:
    """One representative per distinct launch, recorded over every case in fp32, fp16 and bf16."""
    recorded: dict[tuple, tuple] = {}

    def record(self: JITFunction, *args, grid, warmup, **kwargs) -> None:
        bound = dict(zip(self.arg_names, args))
        bound.update((k, v) for k, v in kwargs.items() if k in self.arg_names)
        options = {k: v for k, v in kwargs.items() if k not in self.arg_names}
        signature, constexprs = _signature(self, bound)
        shape_free = tuple(sorted((k, str(v)) for k, v in constexprs.items() if not k.startswith("BLOCK_")))
        recorded.setdefault(
            (self.fn.__name__, tuple(signature.items()), shape_free), (self, signature, constexprs, options)
        )

    candidates = {c.op: c for c in FAMILY.candidates}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(JITFunction, "run", record)
        for case in CASES:
            if case.op not in candidates:
                continue
            for dtype in (torch.float32, torch.float16, torch.bfloat16):
                if ineligibility(candidates[case.op], SelectionContext(dtype, features=case.features)) is not None:
                    continue  # e.g. biased experts, which the Triton MoE declares it does not serve
                args = case.make(torch.Generator().manual_seed(zlib.crc32(case.id.encode())), dtype)
                case.call(load(candidates[case.op]), to_device(args, torch.device("cpu")))
    return list(recorded.values())


@pytest.mark.parametrize("target_name", TARGETS)
def test_every_launch_compiles(target_name: str, launches) -> None:
    target = TARGETS[target_name]
    failures = []
    for fn, signature, constexprs, options in launches:
        if target.backend == "hip":
            options = {**options, "waves_per_eu": 2}
        try:
            triton.compile(ASTSource(fn, signature, constexprs), target=target, options=options)
        except Exception as exc:  # every failure is reported, with its kernel
            failures.append(f"{fn.fn.__name__} {constexprs}: {str(exc)[-600:]}")
    assert {fn.fn.__name__ for fn, *_ in launches} >= {"extend_kernel", "decode_split_kernel", "_grouped_gemm_kernel"}
    assert not failures, "\n\n".join(failures)
