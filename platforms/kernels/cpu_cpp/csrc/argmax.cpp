// Greedy sampling's argmax over float32 logits [B, V], with torch.argmax's semantics exactly (the
// reference's contract): on ties the lowest index wins, and a NaN counts as larger than any
// number, so a row with a NaN gives its first NaN's index.
//
// Why C++: torch's argmax reduction took about 55 us a row over a 49152-entry vocabulary on this
// class of machine, 1-2% of a decode step, for one read of 192 KB; this loop takes about 4 us
// (benchmarks/README.md, "Measured costs").
#include "ops.h"
#include "vector_math.h"
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/record_function.h>
#include <torch/library.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace {

// Rows are split over threads only when a task scans enough values to pay for waking threads:
// a decode row of a large vocabulary is a task of its own, a batch of small rows runs inline.
constexpr int64_t VALUES_PER_TASK = 1 << 15;

int64_t first_nan(const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (std::isnan(x[i])) return i;
  return -1;
}

int64_t argmax_row(const float* x, int64_t n) {
  int64_t best = 0, i = 0;
#ifdef SGL_AVX2
  // Four independent sets of 8 lanes, so that each compare-and-blend does not wait for the last
  // one. A lane keeps its running maximum and the start of the 32-value block it came from;
  // strictly greater (_CMP_GT_OQ) keeps each lane's first occurrence, and the lanes' reduction
  // takes the lowest index among equal maxima. NaNs never win a compare (ordered), so they are
  // only noted here (unordered compares pair two vectors at once) and found by a scan.
  if (n >= 32) {
    __m256 top[4];
    __m256i block[4];
    for (int u = 0; u < 4; ++u) {
      top[u] = _mm256_loadu_ps(x + 8 * u);
      block[u] = _mm256_setzero_si256();
    }
    __m256 nan = _mm256_or_ps(_mm256_cmp_ps(top[0], top[1], _CMP_UNORD_Q), _mm256_cmp_ps(top[2], top[3], _CMP_UNORD_Q));
    __m256i start = _mm256_setzero_si256();
    const __m256i step = _mm256_set1_epi32(32);
    for (i = 32; i + 32 <= n; i += 32) {
      start = _mm256_add_epi32(start, step);
      __m256 v[4];
      for (int u = 0; u < 4; ++u) {
        v[u] = _mm256_loadu_ps(x + i + 8 * u);
        const __m256 greater = _mm256_cmp_ps(v[u], top[u], _CMP_GT_OQ);
        top[u] = _mm256_blendv_ps(top[u], v[u], greater);
        block[u] = _mm256_blendv_epi8(block[u], start, _mm256_castps_si256(greater));
      }
      nan = _mm256_or_ps(nan, _mm256_or_ps(_mm256_cmp_ps(v[0], v[1], _CMP_UNORD_Q),
                                           _mm256_cmp_ps(v[2], v[3], _CMP_UNORD_Q)));
    }
    if (_mm256_movemask_ps(nan)) return first_nan(x, i);
    alignas(32) float values[32];
    alignas(32) int32_t starts[32];
    for (int u = 0; u < 4; ++u) {
      _mm256_store_ps(values + 8 * u, top[u]);
      _mm256_store_si256(reinterpret_cast<__m256i*>(starts + 8 * u), block[u]);
    }
    best = starts[0];
    for (int lane = 1; lane < 32; ++lane) {
      const int64_t at = starts[lane] + lane;
      if (values[lane] > x[best] || (values[lane] == x[best] && at < best)) best = at;
    }
  }
#endif
  for (; i < n; ++i) {
    // No NaN came before i (the vector part returned otherwise), so the first one seen is the answer.
    if (std::isnan(x[i])) return i;
    if (x[i] > x[best]) best = i;
  }
  return best;
}

}  // namespace

namespace sgl_cpu_cpp {

at::Tensor argmax(const at::Tensor& logits) {
  RECORD_FUNCTION("sglang_cpu_cpp::argmax", std::vector<c10::IValue>());
  TORCH_CHECK(logits.device().is_cpu() && logits.scalar_type() == at::kFloat && logits.dim() == 2,
              "argmax: float32 [B, V] on the host");
  const int64_t rows = logits.size(0), V = logits.size(1);
  TORCH_CHECK(V > 0 && V <= std::numeric_limits<int32_t>::max(), "argmax: vocabulary of ", V);
  // A view (rows picked out of a larger batch) is copied once into rows; the input is only read.
  const at::Tensor x = logits.contiguous();
  at::Tensor out = at::empty({rows}, logits.options().dtype(at::kLong));
  const float* xp = x.data_ptr<float>();
  int64_t* op = out.data_ptr<int64_t>();
  at::parallel_for(0, rows, std::max<int64_t>(1, VALUES_PER_TASK / V), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) op[r] = argmax_row(xp + r * V, V);
  });
  return out;
}

}  // namespace sgl_cpu_cpp

TORCH_LIBRARY_FRAGMENT(sglang_cpu_cpp, m) {
  m.def("argmax(Tensor logits) -> Tensor");
}

TORCH_LIBRARY_IMPL(sglang_cpu_cpp, CPU, m) {
  m.impl("argmax", &sgl_cpu_cpp::argmax);
}
