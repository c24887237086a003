"""The cpu_cpp build's flags follow the CPU's vector extensions, and key the build's cache folder."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from sglang.platforms.kernels.cpu_cpp import build

pytestmark = pytest.mark.skipif(
    torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"), reason="no AVX2: the portable build"
)
AVX2 = ["-O3", "-fopenmp", "-mavx2", "-mfma", "-mf16c"]


AVX512 = ["-mavx512f", "-mavx512bw", "-mavx512vl"]
SPR = {"avx_vnni", "avx512f", "avx512bw", "avx512vl", "avx512_vnni"}


@pytest.mark.parametrize(
    ("cpu_flags", "extra"),
    [
        (set(), []),
        ({"avx2", "fma"}, []),
        ({"avx_vnni"}, ["-mavxvnni"]),
        ({"avx512f", "avx512bw", "avx512vl"}, AVX512),
        ({"avx512f"}, []),  # no BW / VL: AVX2's kernels
        ({"avx512f", "avx512bw", "avx512vl", "avx512_vnni"}, [*AVX512, "-mavx512vnni"]),
        (SPR, ["-mavxvnni", *AVX512, "-mavx512vnni"]),
    ],
)
def test_flags_by_cpu(cpu_flags: set[str], extra: list[str]) -> None:
    assert build.compile_flags(frozenset(cpu_flags)) == AVX2 + extra


def test_each_flag_set_has_its_own_cache_folder() -> None:
    assert build.build_folder(AVX2) != build.build_folder(build.compile_flags(frozenset(SPR)))


def test_machine_flags_are_read_from_cpuinfo() -> None:
    if not Path("/proc/cpuinfo").exists():
        pytest.skip("no /proc/cpuinfo")
    flags = build.machine_cpu_flags()
    assert "avx2" in flags  # this test only runs where torch found AVX2
