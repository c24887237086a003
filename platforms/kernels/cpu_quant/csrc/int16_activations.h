// Quantized linear for few input rows (decode), with the activations quantized to int16 on the
// fly, per 32-value block: y[M, N] = x[M, K] @ dequant(W)[N, K]^T.
//
// Why: on an AVX2 core without VNNI, converting every weight to float costs more instructions
// than the multiply, so at one or a few rows a float kernel is bound by that conversion, far
// below memory bandwidth. With x quantized per block, xq = round(x / dx), a block's dot product
// is integer arithmetic: sum_j w_j x_j ~ dx * scale * sum_j q_j xq_j + offset * dx * sum_j xq_j,
// where the integer sum takes one multiply-add instruction per 16 pairs (madd_epi16).
// Why int16 and not int8 (llama.cpp's Q8 activations, which AVX2 multiplies twice as densely):
// the last hidden state of a small model has a few large channels, and at int8 the rounding of
// the other values of their blocks moved lm_head logits by 1%, enough to flip greedy answers;
// int16 rounds 256 times finer (each value off by at most dx / 2, dx = max|block| / 32767) at
// about the same speed, since unpacking the weights costs as much as the multiply.
// With more rows the float kernel (a dequantized tile reused by every row) is faster, so
// quant_linear.cpp uses this one only up to each format's `max_rows` (measured: one thread,
// the embedded model's shapes; int4's unpacking costs more, so it pays off for fewer rows).
//
// Invariant: every output (m, n) sums its blocks in ascending order in one vector accumulator,
// plus one scalar for the offsets, whatever the other rows of the call are.
#pragma once
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cmath>
#include <vector>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define SGL_AVX2 1
#endif

namespace sgl_int16_activations {

constexpr int64_t BLOCK = 32;
constexpr int TILE_N = 4;  // weight rows computed together: each x block is loaded once for them

// The weights this path serves: whole 32-value blocks, at least one full tile of rows.
inline bool serves(int64_t N, int64_t K, int64_t G) { return N >= TILE_N && K % BLOCK == 0 && G % BLOCK == 0; }

// x quantized per 32-value block: q int16 [M, K], scale d [M, K/32], and d * sum(q) [M, K/32].
struct QuantizedRows {
  std::vector<int16_t> q;
  std::vector<float> d, dsum;
};

void quantize_row(const float* x, int64_t K, int16_t* q, float* d, float* dsum) {
  for (int64_t b = 0; b < K / BLOCK; ++b) {
    const float* xb = x + b * BLOCK;
    float amax = 0.f;
    for (int64_t j = 0; j < BLOCK; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float scale = amax / 32767.f;
    const float inv = scale > 0.f ? 1.f / scale : 0.f;
    int32_t sum = 0;
    for (int64_t j = 0; j < BLOCK; ++j) {
      const int32_t v = static_cast<int32_t>(std::nearbyint(xb[j] * inv));
      q[b * BLOCK + j] = static_cast<int16_t>(v);
      sum += v;
    }
    d[b] = scale;
    dsum[b] = scale * static_cast<float>(sum);
  }
}

inline QuantizedRows quantize_rows(const float* x, int64_t M, int64_t K) {
  QuantizedRows rows{std::vector<int16_t>(M * K), std::vector<float>(M * K / BLOCK), std::vector<float>(M * K / BLOCK)};
  for (int64_t m = 0; m < M; ++m)
    quantize_row(x + m * K, K, rows.q.data() + m * K, rows.d.data() + m * K / BLOCK, rows.dsum.data() + m * K / BLOCK);
  return rows;
}

struct Int4Format {
  static constexpr bool has_offset = true;
  static constexpr int64_t max_rows = 2;
  const uint8_t* packed;
  const float* scales;
  const float* offsets;
  int64_t K, G;

  int64_t group(int64_t n, int64_t b) const { return n * (K / G) + b * BLOCK / G; }
#ifdef SGL_AVX2
  // The block's 32 values as int16, values 0..15 in `lo` and 16..31 in `hi` (natural order).
  void unpack(int64_t n, int64_t b, __m256i& lo, __m256i& hi) const {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(packed + n * (K / 2) + b * (BLOCK / 2)));
    const __m128i mask = _mm_set1_epi8(0x0F);
    lo = _mm256_cvtepu8_epi16(_mm_and_si128(bytes, mask));
    hi = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(bytes, 4), mask));
  }
#endif
  int32_t value(int64_t n, int64_t k) const {
    const uint8_t byte = packed[n * (K / 2) + k / BLOCK * (BLOCK / 2) + k % (BLOCK / 2)];
    return k % BLOCK < BLOCK / 2 ? byte & 0x0F : byte >> 4;
  }
};

struct Int8Format {
  static constexpr bool has_offset = false;
  static constexpr int64_t max_rows = 4;
  const int8_t* q;
  const float* scales;
  int64_t K, G;

  int64_t group(int64_t n, int64_t b) const { return n * (K / G) + b * BLOCK / G; }
#ifdef SGL_AVX2
  void unpack(int64_t n, int64_t b, __m256i& lo, __m256i& hi) const {
    const int8_t* p = q + n * K + b * BLOCK;
    lo = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    hi = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)));
  }
#endif
  int32_t value(int64_t n, int64_t k) const { return q[n * K + k]; }
};

#ifdef SGL_AVX2
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
#endif

template <typename Format>
float offset_of(const Format& w, int64_t group) {
  if constexpr (Format::has_offset) return w.offsets[group];
  return 0.f;
}

// y[m, n0 + r] for r < TILE_N: each x block is loaded once and multiplied with the tile's rows.
template <typename Format>
void tile_row(const Format& w, const QuantizedRows& x, int64_t m, int64_t n0, float* y, int64_t N) {
  const int64_t blocks = w.K / BLOCK;
  float offset_acc[TILE_N] = {};
#ifdef SGL_AVX2
  __m256 acc[TILE_N];
  for (int r = 0; r < TILE_N; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const int16_t* xb = x.q.data() + (m * blocks + b) * BLOCK;
    const __m256i x_lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb));
    const __m256i x_hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + 16));
    const float dx = x.d[m * blocks + b], dsum = x.dsum[m * blocks + b];
    for (int r = 0; r < TILE_N; ++r) {
      __m256i lo, hi;
      w.unpack(n0 + r, b, lo, hi);
      const __m256i dot = _mm256_add_epi32(_mm256_madd_epi16(lo, x_lo), _mm256_madd_epi16(hi, x_hi));
      const int64_t g = w.group(n0 + r, b);
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(w.scales[g] * dx), acc[r]);
      // An explicit fma: left to the compiler, contraction could differ between instantiations.
      if constexpr (Format::has_offset) offset_acc[r] = std::fma(offset_of(w, g), dsum, offset_acc[r]);
    }
  }
  for (int r = 0; r < TILE_N; ++r) y[m * N + n0 + r] = hsum(acc[r]) + offset_acc[r];
#else
  for (int r = 0; r < TILE_N; ++r) {
    float total = 0.f;
    for (int64_t b = 0; b < blocks; ++b) {
      const int16_t* xb = x.q.data() + (m * blocks + b) * BLOCK;
      int32_t dot = 0;
      for (int64_t j = 0; j < BLOCK; ++j) dot += w.value(n0 + r, b * BLOCK + j) * xb[j];
      const int64_t g = w.group(n0 + r, b);
      total = std::fma(w.scales[g] * x.d[m * blocks + b], static_cast<float>(dot), total);
      offset_acc[r] = std::fma(offset_of(w, g), x.dsum[m * blocks + b], offset_acc[r]);
    }
    y[m * N + n0 + r] = total + offset_acc[r];
  }
#endif
}

// y[M, N] (row-major, preallocated) for x[M, K]; `serves(N, K, G)` must hold.
template <typename Format>
void matmul(const float* x, int64_t M, const Format& w, int64_t N, float* y) {
  const QuantizedRows xq = quantize_rows(x, M, w.K);
  const int64_t tiles = (N + TILE_N - 1) / TILE_N;
  // Enough tiles per task to amortize scheduling, few enough to balance across threads.
  const int64_t grain = std::max<int64_t>(1, std::min<int64_t>(64, tiles / (4 * at::get_num_threads())));
  at::parallel_for(0, tiles, grain, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      // A ragged last tile overlaps the one before it: the shared outputs get the same values.
      const int64_t n0 = std::min(t * TILE_N, N - TILE_N);
      for (int64_t m = 0; m < M; ++m) tile_row(w, xq, m, n0, y, N);
    }
  });
}

}  // namespace sgl_int16_activations
