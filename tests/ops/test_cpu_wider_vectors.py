"""The cpu_cpp quantized linear built for this machine's wider vectors (VNNI, AVX-512) gives the
bits of the AVX2 build, on both kernels (the int16 one up to 32 rows, the float one past it).

Both builds compile quant_linear.cpp (less its op registrations) into throwaway extensions, one
with the AVX2 flags alone and one with `compile_flags()`; skipped where they are the same.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch
from torch.utils.cpp_extension import load

from sglang.ops.quant import WeightFormat, quantize
from sglang.platforms.kernels.cpu_cpp.build import CSRC, compile_flags

AVX2_FLAGS = ["-O3", "-fopenmp", "-mavx2", "-mfma", "-mf16c"]
BINDINGS = """
#include <torch/extension.h>
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("int4_linear", &sgl_cpu_cpp::int4_linear);
  m.def("int8_linear", &sgl_cpu_cpp::int8_linear);
  m.def("int4_tiles", &sgl_cpu_cpp::int4_tiles);
  m.def("int8_tiles", &sgl_cpu_cpp::int8_tiles);
}
"""

pytestmark = pytest.mark.skipif(
    torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512") or compile_flags() == AVX2_FLAGS,
    reason="this machine's build has no vector extension beyond AVX2",
)


def build(flags: list[str], folder: Path):
    quant_linear = (CSRC / "quant_linear.cpp").read_text()
    source = quant_linear[: quant_linear.index("TORCH_LIBRARY(")] + BINDINGS
    name = "wider_" + hashlib.sha256((source + " ".join(flags)).encode()).hexdigest()[:12]
    folder = folder / name
    folder.mkdir()
    (folder / "harness.cpp").write_text(source)
    return load(
        name=name,
        sources=[str(folder / "harness.cpp")],
        extra_include_paths=[str(CSRC)],
        extra_cflags=[*flags, "-w"],
        extra_ldflags=["-fopenmp"],
        build_directory=str(folder),
    )


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    folder = tmp_path_factory.mktemp("wider")
    return build(AVX2_FLAGS, folder), build(compile_flags(), folder)


@pytest.mark.parametrize("rows", [1, 3, 8, 32, 33, 100])
@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("k", [576, 608])  # 18 and 19 blocks: the AVX-512 kernel takes them in pairs
def test_same_bits_as_the_avx2_build(builds: tuple, bits: int, rows: int, k: int) -> None:
    gen = torch.Generator().manual_seed(rows)
    n = 200  # a ragged last tile of either kernel
    w = quantize(torch.randn(n, k, generator=gen), WeightFormat(bits, 32 if bits == 4 else k))
    x = torch.randn(rows, k, generator=gen)
    x[:, 7] *= 30  # a large channel, as a small model's hidden state has
    outputs = []
    for module in builds:
        if bits == 4:
            tiles = module.int4_tiles(w.qdata, w.scales, w.offsets, w.group)
            outputs.append(module.int4_linear(x, w.qdata, w.scales, w.offsets, w.group, tiles, None))
        else:
            tiles = module.int8_tiles(w.qdata, w.scales, w.group)
            outputs.append(module.int8_linear(x, w.qdata, w.scales, w.group, tiles, None))
    assert torch.equal(outputs[0], outputs[1])
    assert (outputs[0] - x @ w.dequantize().T).abs().max() < 1e-2 * x.abs().max() * k**0.5
