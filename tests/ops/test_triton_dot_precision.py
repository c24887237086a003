"""The Triton kernels' dots take fp16/bf16 operands (tensor cores) and accumulate in fp32.

Before issue 29 every `tl.dot` upcast its operands to fp32 with `input_precision="ieee"`, which
an NVIDIA GPU runs on FMA units, not tensor cores. The interpreter cannot tell (it multiplies in
numpy either way), so this test reads the kernels as Triton's front end types them: each launch
the parity cases make in fp16 and bf16 is lowered to TTIR for sm_90, and every `tt.dot` in it
must multiply operands of that dtype into an fp32 result. No GPU is used or claimed; fp32 launches
keep fp32 operands with "ieee" (exact, no TF32), which `jit_math` documents.
"""

from __future__ import annotations

import os
import re
import zlib

import pytest
import torch

from sglang.ci.suites.devices import to_device
from sglang.ci.suites.op_cases import CASES
from sglang.ops.binding import load
from sglang.platforms.kernels.triton.family import FAMILY

triton = pytest.importorskip("triton")
pytestmark = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET", "") == "1", reason="under TRITON_INTERPRET=1 kernels are not lowered"
)

from triton._C.libtriton import ir  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402
from triton.compiler.compiler import make_backend  # noqa: E402
from triton.runtime.jit import JITFunction  # noqa: E402

from tests.ops.test_triton_compile import _signature  # noqa: E402

DOT_KERNELS = {"extend_kernel", "decode_split_kernel", "_grouped_gemm_kernel"}
CASE_IDS = (
    "attention_backend-cached_prefix-gqa7_d128-page16",
    "attention_backend-decode-gqa7_d128-page16",
    "moe_experts-e8_top2_tiled",
)
MLIR_TYPES = {torch.float16: "f16", torch.bfloat16: "bf16"}
DOT = re.compile(r"tt\.dot .*: tensor<[^>]*x(\w+)> \* tensor<[^>]*x(\w+)> -> tensor<[^>]*x(\w+)>")


def _ttir(fn: JITFunction, signature: dict, constexprs: dict) -> str:
    target = GPUTarget("cuda", 90, 32)
    backend = make_backend(target)
    options = backend.parse_options({})
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    source = ASTSource(fn, signature, constexprs)
    module = source.make_ir(
        target, options, backend.get_codegen_implementation(options), backend.get_module_map(), context
    )
    return str(module)


def _launches(dtype: torch.dtype) -> list[tuple[JITFunction, dict, dict]]:
    recorded: dict[str, tuple] = {}

    def record(self: JITFunction, *args, grid, warmup, **kwargs) -> None:
        bound = dict(zip(self.arg_names, args))
        bound.update((k, v) for k, v in kwargs.items() if k in self.arg_names)
        if self.fn.__name__ in DOT_KERNELS:
            recorded.setdefault(self.fn.__name__, (self, *_signature(self, bound)))

    candidates = {c.op: c for c in FAMILY.candidates}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(JITFunction, "run", record)
        for case in (c for c in CASES if c.id in CASE_IDS):
            args = case.make(torch.Generator().manual_seed(zlib.crc32(case.id.encode())), dtype)
            case.call(load(candidates[case.op]), to_device(args, torch.device("cpu")))
    return list(recorded.values())


@pytest.mark.parametrize("dtype", list(MLIR_TYPES), ids=str)
def test_dots_take_half_operands_and_accumulate_in_fp32(dtype: torch.dtype) -> None:
    launches = _launches(dtype)
    assert {fn.fn.__name__ for fn, *_ in launches} == DOT_KERNELS
    for fn, signature, constexprs in launches:
        dots = DOT.findall(_ttir(fn, signature, constexprs))
        assert dots, f"{fn.fn.__name__}: no tt.dot found"
        for lhs, rhs, out in dots:
            assert (lhs, rhs, out) == (MLIR_TYPES[dtype], MLIR_TYPES[dtype], "f32"), f"{fn.fn.__name__}: {dots}"
