// Vector math shared by the family's float32 kernels: AVX2/FMA forms where the build has them
// (SGL_AVX2), each with the scalar loop it replaces for tails and for portable builds.
#pragma once
#include <cmath>
#include <cstdint>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define SGL_AVX2 1
#endif

namespace sgl_cpu_cpp {

#ifdef SGL_AVX2
// exp(x) for x <= 0: 2^n * p(r) with r = x - n ln 2, |r| <= ln 2 / 2, p Cephes' degree-6
// polynomial (relative error about 2e-7); 0 below float's smallest normal.
inline __m256 exp_nonpositive(__m256 x) {
  const __m256 smallest = _mm256_set1_ps(-87.33654f);
  const __m256 underflow = _mm256_cmp_ps(x, smallest, _CMP_LT_OQ);
  x = _mm256_max_ps(x, smallest);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  for (const float c : {1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f})
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
  const __m256 y = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.f)));
  const __m256i two_n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(underflow, _mm256_mul_ps(y, _mm256_castsi256_ps(two_n)));
}
#endif

// out[i] = silu(gate[i]) * up[i] for i < n. The vector form takes the sigmoid from e = exp(-|g|),
// which cannot overflow: 1 / (1 + e) for g >= 0, e / (1 + e) for g < 0 (within a few ulp of
// g / (1 + exp(-g))). A scalar expf per value cost about 8 ns, most of a decode MLP's glue.
inline void silu_mul_row(const float* gate, const float* up, int64_t n, float* out) {
  int64_t i = 0;
#ifdef SGL_AVX2
  const __m256 one = _mm256_set1_ps(1.f), sign = _mm256_set1_ps(-0.f);
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 e = exp_nonpositive(_mm256_or_ps(g, sign));
    const __m256 sigmoid = _mm256_div_ps(_mm256_blendv_ps(one, e, g), _mm256_add_ps(one, e));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(g, sigmoid), _mm256_loadu_ps(up + i)));
  }
#endif
  for (; i < n; ++i) out[i] = gate[i] / (1.f + std::exp(-gate[i])) * up[i];
}

}  // namespace sgl_cpu_cpp
