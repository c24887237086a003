"""Builds the family's C++ kernels once per machine and loads them into `torch.ops.sglang_cpu_quant`.

The build runs on first use (binding a candidate) and is cached under
`$SGLANG_CACHE_DIR/torch_extensions` (default `~/.cache/sglang/torch_extensions`), keyed by the
source, the compile flags and the torch version: later starts only load the shared library.
torch's extension builder holds a lock on the build folder, so two processes starting at once
build it once. The vector path needs AVX2 and FMA; on a CPU without them the same source builds
its portable loops instead (slower, same results).
"""

from __future__ import annotations

import hashlib
import logging
import time
from functools import cache
from pathlib import Path
from types import ModuleType

import torch

from sglang.runtime.loader.cache import cache_root

logger = logging.getLogger(__name__)

CSRC = Path(__file__).with_name("csrc")
SOURCES = tuple(CSRC / f for f in ("quant_linear.cpp", "decode_attention.cpp", "decode_glue.cpp", "bindings.cpp"))
HEADERS = (CSRC / "int16_activations.h", CSRC / "record_arena.h", CSRC / "bindings.h")
NAME = "sglang_cpu_quant"


def compile_flags() -> list[str]:
    flags = ["-O3", "-fopenmp"]
    if torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512"):
        flags += ["-mavx2", "-mfma", "-mf16c"]
    return flags


def kernel_ops() -> ModuleType | torch._ops._OpNamespace:
    """The family's ops: the extension module's own bindings when eager (a direct call, about
    2 us less than torch's dispatcher, and a decode step makes about 270 of them); under
    torch.compile, `torch.ops.sglang_cpu_quant`, which the compiler traces through the fakes."""
    return torch.ops.sglang_cpu_quant if torch.compiler.is_compiling() else ensure_built()


@cache
def ensure_built() -> ModuleType:
    """Loads the kernels (the module, with its ops also registered in `torch.ops`), building them
    first if this machine has no cached build."""
    from torch.utils.cpp_extension import load

    flags = compile_flags()
    digest = hashlib.sha256(" ".join(flags).encode() + torch.__version__.encode())
    for source in (*SOURCES, *HEADERS):
        digest.update(source.read_bytes())
    key = digest.hexdigest()
    folder = cache_root("torch_extensions") / f"{NAME}-{key[:16]}"
    folder.mkdir(parents=True, exist_ok=True)
    cached = (folder / f"{NAME}.so").exists()
    started = time.perf_counter()
    module = load(name=NAME, sources=[str(s) for s in SOURCES], extra_cflags=flags, extra_ldflags=["-fopenmp"],
                  build_directory=str(folder), is_python_module=True)  # fmt: skip
    action = "loaded" if cached else "built"
    logger.info("%s %s kernels (%s) in %.1f s", action, NAME, " ".join(flags), time.perf_counter() - started)
    _register_fakes()
    return module


def _register_fakes() -> None:
    """Output shapes for tracing (torch.compile): the ops are opaque to the compiler."""

    def out(x: torch.Tensor, qdata: torch.Tensor) -> torch.Tensor:
        return x.new_empty((*x.shape[:-1], qdata.shape[0]))

    torch.library.register_fake(f"{NAME}::int4_linear")(
        lambda x, packed, scales, offsets, group, tiles, bias: out(x, packed)
    )
    torch.library.register_fake(f"{NAME}::int8_linear")(lambda x, qweight, scales, group, tiles, bias: out(x, qweight))
    torch.library.register_fake(f"{NAME}::decode_attention")(lambda q, kv, slots, starts, scale: torch.empty_like(q))
    torch.library.register_fake(f"{NAME}::decode_attention_store")(
        lambda q, k, v, kv, new_slots, slots, starts, scale: torch.empty_like(q)
    )
    torch.library.register_fake(f"{NAME}::rms_norm")(lambda x, weight, eps: torch.empty_like(x))
    torch.library.register_fake(f"{NAME}::fused_add_rms_norm")(
        lambda x, residual, weight, eps: (torch.empty_like(x), torch.empty_like(x))
    )
    torch.library.register_fake(f"{NAME}::apply_rotary")(
        lambda positions, q, k, cos_sin, is_neox: (torch.empty_like(q), torch.empty_like(k))
    )
    torch.library.register_fake(f"{NAME}::silu_and_mul")(lambda x: x.new_empty((*x.shape[:-1], x.shape[-1] // 2)))
