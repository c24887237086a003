"""Builds the family's C++ kernels once per machine and loads them into `torch.ops.sglang_cpu_cpp`.

The build runs in `sglang build-kernels` (which `make setup` runs, and `make serve` beside the
server's start), else in the first start that selects the family's ops, and is cached under
`$SGLANG_CACHE_DIR/torch_extensions` (default `~/.cache/sglang/torch_extensions`), in a folder
keyed by the sources, the compiler, its flags, the Python version and the torch version. The
vector path needs AVX2 and FMA; on a CPU without them the same source builds its portable loops
instead (slower, same results). Where the CPU has VNNI or AVX-512 the build uses them too
(`compile_flags`), with the same results.

Invariants:
- A cache folder under its final name holds a complete build: torch's builder runs in a child
  process inside a temporary sibling, which is renamed into place when it succeeds.
- A start that finds the folder imports its shared library directly: no compiler, no ninja and
  no lock, so a second checkout of the same sources reuses the build.
- Processes that find no build take an OS file lock while one of them builds; the others wait
  for it (logged), then load what it published. The kernel releases the lock when its holder
  exits, however it exits, so a build that was killed blocks nobody.
- A build that fails is not cached: `build_failure` returns the compiler's reason, the family's
  candidates become ineligible with it, and the platform's next family serves their ops.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import logging
import sys
import time
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import TextIO

import torch

from sglang.platforms.cache import cache_root, publish
from sglang.platforms.kernels.cpu_cpp.compiler import LDFLAGS, KernelBuildError, compile_into, compiler, jobs

logger = logging.getLogger(__name__)

CSRC = Path(__file__).with_name("csrc")
SOURCES = tuple(
    CSRC / f
    for f in (
        "quant_linear.cpp",
        "decode_attention.cpp",
        "decode_glue.cpp",
        "lora.cpp",
        "argmax.cpp",
        "step_tape.cpp",
        "bindings.cpp",
    )
)
HEADERS = tuple(
    CSRC / f
    for f in ("int16_activations.h", "chunk_queue.h", "record_arena.h", "ops.h", "step_tape.h", "vector_math.h")
)
NAME = "sglang_cpu_cpp"


EXTENSIONS = (
    (("avx_vnni",), ("-mavxvnni",)),
    (("avx512f", "avx512bw", "avx512vl"), ("-mavx512f", "-mavx512bw", "-mavx512vl")),
    (("avx512_vnni", "avx512vl"), ("-mavx512vnni", "-mavx512vl")),
)
"""Vector extensions beyond AVX2 the build uses where the CPU has them, as (the /proc/cpuinfo
flags a CPU needs, the compiler flags): AVX-VNNI or AVX-512 VNNI make the int16 kernel's
multiply-add and add one instruction (int16_activations.h `madd_add`); AVX-512 (with BW and VL)
gives the int16 kernel two records per vector (`add_record_pair`) and the float kernel 16 lanes
(quant_linear.cpp `Lanes`)."""


def compile_flags(cpu_flags: frozenset[str] | None = None) -> list[str]:
    """The build's flags on a CPU with `cpu_flags` (default: this machine's). Every extension
    beyond AVX2 changes how many values an instruction takes, never an output's bits."""
    flags = ["-O3", "-fopenmp"]
    if torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512"):
        flags += ["-mavx2", "-mfma", "-mf16c"]
        cpu_flags = machine_cpu_flags() if cpu_flags is None else cpu_flags
        for needed, extra in EXTENSIONS:
            if cpu_flags.issuperset(needed):
                flags += [f for f in extra if f not in flags]
    return flags


def machine_cpu_flags() -> frozenset[str]:
    """The instruction-set flags Linux lists for this machine's first CPU (none elsewhere)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return frozenset()
    return frozenset(next((line.split(":", 1)[1].split() for line in lines if line.startswith("flags")), []))


_dispatching = False
"""Set while a step tape records (see `dispatched_kernel_ops`)."""


def kernel_ops() -> ModuleType | torch._ops._OpNamespace:
    """The family's ops: the extension module's own bindings when eager (a direct call, about
    2 us less than torch's dispatcher, and a decode step makes about 270 of them); under
    torch.compile, torch.jit.trace or a step tape's recording, `torch.ops.sglang_cpu_cpp`, which
    all three see (the compiler traces through the fakes; the tracer would take a direct call's
    result for a constant, and the recorder would not see it)."""
    if _dispatching or torch.compiler.is_compiling() or torch.jit.is_tracing():
        return torch.ops.sglang_cpu_cpp
    return ensure_built()


@contextlib.contextmanager
def dispatched_kernel_ops() -> Iterator[None]:
    """While open, `kernel_ops()` is `torch.ops.sglang_cpu_cpp` (a dispatch mode sees its calls)."""
    global _dispatching
    previous, _dispatching = _dispatching, True
    try:
        yield
    finally:
        _dispatching = previous


def build_folder(flags: list[str]) -> Path:
    """The cache folder of a build with `flags`: a new one whenever anything the library's
    binary depends on changes (sources, compiler, flags, Python's ABI, torch)."""
    key = [compiler(), *flags, *LDFLAGS, sys.implementation.cache_tag, torch.__version__]
    digest = hashlib.sha256("\0".join(key).encode())
    for source in (*SOURCES, *HEADERS):
        digest.update(source.read_bytes())
    return cache_root("torch_extensions") / f"{NAME}-{digest.hexdigest()[:16]}"


@cache
def ensure_built() -> ModuleType:
    """Loads the kernels (the module, with its ops also registered in `torch.ops`), building them
    first if this machine has no cached build."""
    flags = compile_flags()
    folder = build_folder(flags)
    library = folder / f"{NAME}.so"
    started = time.perf_counter()
    action = "loaded"
    if not library.exists():
        folder.parent.mkdir(parents=True, exist_ok=True)
        with open(folder.with_name(f".{folder.name}.lock"), "w") as lock:
            _lock_logging_the_wait(lock)
            if not library.exists():
                shown = " ".join(flags)
                logger.info("building %s kernels (%s, %d jobs) into %s; once per machine", NAME, shown, jobs(), folder)
                publish(folder, lambda tmp: compile_into(tmp, NAME, SOURCES, flags))
                action = "built"
    module = _import(library)
    logger.info("%s %s kernels (%s) in %.1f s", action, NAME, " ".join(flags), time.perf_counter() - started)
    _register_fakes()
    return module


def _lock_logging_the_wait(lock: TextIO) -> None:
    """Takes the build lock; when another process holds it (`sglang build-kernels` beside a
    server's start, or a second server), says so and how long the wait took: its progress is in
    that process's log."""
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        pass
    logger.info("waiting for the %s kernels another process is building (its log shows the progress)", NAME)
    started = time.perf_counter()
    fcntl.flock(lock, fcntl.LOCK_EX)
    logger.info("the other process's %s build ended after %.1f s of waiting", NAME, time.perf_counter() - started)


@cache
def build_failure() -> str | None:
    """Why the kernels cannot run on this machine (the compiler's reason), or None once they are
    loaded: the family's probe, run when a cpu platform selects ops (see KernelFamily.probe)."""
    try:
        ensure_built()
    except KernelBuildError as e:
        logger.warning(
            "%s; the cpu_cpp family is ineligible and the next family serves its ops "
            "(`--op-backend OP=FAMILY` picks one, `--reference-ops` forces the references)",
            e,
        )
        return str(e)
    return None


def _import(library: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(NAME, library)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _register_fakes() -> None:
    """Output shapes for tracing (torch.compile): the ops are opaque to the compiler."""

    def out(x: torch.Tensor, qdata: torch.Tensor) -> torch.Tensor:
        return x.new_empty((*x.shape[:-1], qdata.shape[0]))

    torch.library.register_fake(f"{NAME}::int4_linear")(
        lambda x, packed, scales, offsets, group, tiles, bias: out(x, packed)
    )
    torch.library.register_fake(f"{NAME}::int8_linear")(lambda x, qweight, scales, group, tiles, bias: out(x, qweight))
    torch.library.register_fake(f"{NAME}::decode_attention")(
        lambda q, kv, slots, starts, scale, window, softcap, sinks: torch.empty_like(q)
    )
    torch.library.register_fake(f"{NAME}::decode_attention_store")(
        lambda q, k, v, kv, new_slots, slots, starts, scale, window, softcap, sinks: torch.empty_like(q)
    )
    torch.library.register_fake(f"{NAME}::mla_decode")(
        lambda query, kv, slots, starts, rank, scale: query.new_empty((*query.shape[:2], rank))
    )
    torch.library.register_fake(f"{NAME}::rms_norm")(lambda x, weight, eps: torch.empty_like(x))
    torch.library.register_fake(f"{NAME}::fused_add_rms_norm")(
        lambda x, residual, weight, eps: (torch.empty_like(x), torch.empty_like(x))
    )
    torch.library.register_fake(f"{NAME}::apply_rotary")(
        lambda positions, q, k, cos_sin, is_neox: (torch.empty_like(q), torch.empty_like(k))
    )
    torch.library.register_fake(f"{NAME}::lora_shrink")(lambda x, a, token_slots: x.new_empty((x.shape[0], a.shape[1])))
    torch.library.register_fake(f"{NAME}::lora_expand")(
        lambda y, h, b, token_slots, scaling, out_widths: torch.empty_like(y)
    )
    torch.library.register_fake(f"{NAME}::silu_and_mul")(lambda x: x.new_empty((*x.shape[:-1], x.shape[-1] // 2)))
    torch.library.register_fake(f"{NAME}::argmax")(lambda logits: logits.new_empty(logits.shape[:1], dtype=torch.long))
