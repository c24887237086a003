"""The cpu_cpp quantized linear's kernels by input rows: this checkout's int16 kernel against a
baseline revision's, and against the float (dequantize) kernel, in one process.

The embedded SmolLM2's shapes with random weights: its 30 layers' seven int4 (group 32) matmuls,
and the int8 per-channel lm_head (49152 x 576), float16-exact scales as a GGUF's are. The kernels
are compiled into one throwaway extension: `int16_activations.h` of `--baseline` (its namespace
renamed) beside this checkout's, and the float kernel of this checkout's `quant_linear.cpp` (the
file up to its op registrations), with the flags the family's build takes on this machine
(`compile_flags`: VNNI where the CPU has it). Each round runs every kernel once per row count, the order
reversed every other round; the best round of each is reported, as ratios within the run.
One thread by default, timed in thread CPU time (the machine is shared); `--threads 2` times
wall clock.

Also checked, before timing: this checkout's rows are bit-identical whether a call has 1, 5, 8,
12 or 32 rows (verify rows equal decode rows), and whether they equal the baseline's bits.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_quant_linear.py [--baseline main] [--rows 1 4 8 16 32]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

import torch
from torch.utils.cpp_extension import load

from sglang.platforms.kernels.cpu_cpp.build import compile_flags

ROOT = Path(__file__).resolve().parents[1]
CSRC = ROOT / "platforms/kernels/cpu_cpp/csrc"
HEADER = "platforms/kernels/cpu_cpp/csrc/int16_activations.h"
KERNELS = ("baseline", "current", "float")

SOURCE = r"""
#include <torch/extension.h>
#include <time.h>
#include "float_kernel.h"
#include "baseline.h"

namespace now_ = sgl_int16_activations;
namespace was = sgl_baseline;

static bool thread_clock = true;
static double now() {
  timespec t;
  clock_gettime(thread_clock ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

// One weight: its packed data and scales (the float kernel's input), and both headers' records.
struct Weight {
  int bits;
  int64_t N, K;
  at::Tensor data, scales, offsets, current, baseline;
};
static std::vector<Weight> weights;

template <int Bits>
Weight make(int64_t N, int64_t K, int64_t G) {
  at::Tensor data = Bits == 4 ? at::randint(0, 256, {N, K / 2}, at::kByte) : at::randint(-128, 128, {N, K}, at::kChar);
  at::Tensor scales = at::rand({N, K / G}).mul_(0.01).to(at::kHalf).to(at::kFloat);
  at::Tensor offsets = at::rand({N, K / G}).mul_(-0.05).to(at::kHalf).to(at::kFloat);
  const auto* d = static_cast<const uint8_t*>(data.data_ptr());
  const float* o = Bits == 4 ? offsets.data_ptr<float>() : nullptr;
  return {Bits, N, K, data, scales, offsets,
          now_::pack<now_::Tiles<Bits, c10::Half>>(d, scales.data_ptr<float>(), o, N, K, G),
          was::pack<was::Tiles<Bits, c10::Half>>(d, scales.data_ptr<float>(), o, N, K, G)};
}

void setup(int64_t layers) {
  weights.clear();
  const int64_t shapes[7][2] = {{576, 576}, {192, 576}, {192, 576}, {576, 576}, {1536, 576}, {1536, 576}, {576, 1536}};
  for (int64_t l = 0; l < layers; ++l)
    for (const auto& s : shapes) weights.push_back(make<4>(s[0], s[1], 32));
  weights.push_back(make<8>(49152, 576, 576));
}

template <int Bits>
void int16(int kernel, const float* x, int64_t M, const Weight& w, float* y) {
  const int64_t blocks = w.K / 32;
  if (kernel == 0) was::matmul(x, M, was::Tiles<Bits, c10::Half>{w.baseline.data_ptr<uint8_t>(), blocks}, w.N, y);
  else now_::matmul(x, M, now_::Tiles<Bits, c10::Half>{w.current.data_ptr<uint8_t>(), blocks}, w.N, y);
}

void float_kernel(const float* x, int64_t M, const Weight& w, float* y) {
  const int64_t K = w.K, N = w.N;
  at::parallel_for(0, (N + NR - 1) / NR, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> rows(NR * K, 0.f), tile(K * NR);
    for (int64_t t = begin; t < end; ++t) {
      const int64_t n0 = t * NR;
      const int cols = static_cast<int>(std::min<int64_t>(NR, N - n0));
      if (w.bits == 4)
        dequant_int4(w.data.data_ptr<uint8_t>(), w.scales.data_ptr<float>(), w.offsets.data_ptr<float>(), K, 32, n0,
                     cols, rows.data());
      else
        dequant_int8(static_cast<const int8_t*>(w.data.data_ptr()), w.scales.data_ptr<float>(), K, K, n0, cols,
                     rows.data());
      transpose_tile(rows.data(), K, tile.data());
      tile_rows(x, M, K, tile.data(), y, N, n0, cols);
    }
  });
}

void run(int kernel, const float* x, int64_t M, const Weight& w, float* y) {
  if (kernel == 2) float_kernel(x, M, w, y);
  else if (w.bits == 4) int16<4>(kernel, x, M, w, y);
  else int16<8>(kernel, x, M, w, y);
}

// Seconds for one pass of `kernel` (0 baseline, 1 current, 2 float) over the int4 layers and over
// the lm_head, M rows each.
std::vector<double> sweep(int kernel, int64_t M, bool thread_time) {
  thread_clock = thread_time;
  std::vector<float> x(M * 1536), y(M * 49152);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * i);
  const double start = now();
  for (size_t i = 0; i + 1 < weights.size(); ++i) run(kernel, x.data(), M, weights[i], y.data());
  const double layers = now();
  run(kernel, x.data(), M, weights.back(), y.data());
  return {layers - start, now() - layers};
}

// `kernel`'s output on weight `which` for x[M, K] (rows of a fixed pattern).
at::Tensor output(int kernel, int64_t which, const at::Tensor& x) {
  const Weight& w = weights[which];
  at::Tensor y = at::empty({x.size(0), w.N});
  run(kernel, x.contiguous().data_ptr<float>(), x.size(0), w, y.data_ptr<float>());
  return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("setup", &setup);
  m.def("sweep", &sweep);
  m.def("output", &output);
  m.def("count", [] { return static_cast<int64_t>(weights.size()); });
}
"""


def build(baseline: str):
    """The extension with `baseline`'s header and this checkout's, cached by their contents."""
    old = subprocess.run(["git", "show", f"{baseline}:{HEADER}"], cwd=ROOT, check=True, capture_output=True, text=True)
    renamed = old.stdout.replace("namespace sgl_int16_activations", "namespace sgl_baseline")
    renamed = renamed.replace("#pragma once", "")
    quant_linear = (CSRC / "quant_linear.cpp").read_text()
    float_kernel = quant_linear[: quant_linear.index("namespace sgl_cpu_cpp {")].replace('#include "ops.h"', "")
    texts = {"bench.cpp": SOURCE, "baseline.h": renamed, "float_kernel.h": float_kernel}
    digest = hashlib.sha256("\0".join([*texts.values(), (CSRC / "int16_activations.h").read_text()]).encode())
    folder = Path(tempfile.gettempdir()) / f"bench_quant_linear-{digest.hexdigest()[:12]}"
    folder.mkdir(exist_ok=True)
    for name, text in texts.items():
        (folder / name).write_text(text)
    return load(
        name=f"bench_quant_linear_{digest.hexdigest()[:12]}",
        sources=[str(folder / "bench.cpp")],
        extra_include_paths=[str(CSRC), str(folder)],
        extra_cflags=[*compile_flags(), "-w"],
        extra_ldflags=["-fopenmp"],
        build_directory=str(folder),
    )


def check_bits(mod) -> str:
    """Asserts that this checkout's rows do not depend on the call's other rows; says whether they
    equal the baseline's bits."""
    same_as_baseline = True
    for which in (0, 6, mod.count() - 1):
        k = 1536 if which == 6 else 576
        x = torch.arange(32 * k, dtype=torch.float32).reshape(32, k).mul(0.37).sin()
        whole = mod.output(1, which, x)
        for rows in (1, 5, 8, 12):
            assert torch.equal(mod.output(1, which, x[:rows]), whole[:rows]), f"{rows} rows differ from 32"
        same_as_baseline &= torch.equal(mod.output(0, which, x[:12]), whole[:12])
    return "the baseline's bits" if same_as_baseline else "NOT the baseline's bits (different arithmetic)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", default="main", help="git revision whose int16_activations.h is the baseline")
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 2, 4, 8, 12, 16, 24, 32])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    mod = build(args.baseline)
    mod.setup(30)
    print(f"rows 1-32 bit-identical across row counts; {check_bits(mod)}")
    print(f"threads {args.threads}, load {os.getloadavg()}, best of {args.rounds} interleaved rounds")
    per_row = {}
    for rows in args.rows:
        best: dict[str, list[float]] = {k: [1e9, 1e9] for k in KERNELS}
        for r in range(args.rounds):
            for kernel in KERNELS if r % 2 else KERNELS[::-1]:
                seconds = mod.sweep(KERNELS.index(kernel), rows, args.threads == 1)
                best[kernel] = [min(a, b) for a, b in zip(best[kernel], seconds)]
        per_row[rows] = best["current"][0] / rows
        for part, name in ((0, "210 int4 layers"), (1, "int8 lm_head")):
            ms = {k: best[k][part] * 1e3 for k in KERNELS}
            print(
                f"{rows:3d} rows, {name:15s}: baseline {ms['baseline']:7.2f} ms, current {ms['current']:7.2f} ms "
                f"({ms['baseline'] / ms['current']:.2f}x), float {ms['float']:7.2f} ms "
                f"(current {ms['float'] / ms['current']:.2f}x faster)"
            )
    if 4 in per_row:
        ratios = ", ".join(f"{r}: {t / per_row[4]:.2f}" for r, t in per_row.items())
        print(f"int4 cost per row against 4 rows: {ratios}")


if __name__ == "__main__":
    main()
