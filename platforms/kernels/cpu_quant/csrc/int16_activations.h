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
// quant_linear.cpp uses this one only up to each format's `max_rows` (measured: two threads, the
// embedded model's shapes, against the float kernel; int4's unpacking costs more, so its
// crossover comes earlier: int4 wins 1.8x at 6 rows and ties near 8-12, int8 wins 2x at 8).
//
// Invariant: every output (m, n) sums its blocks in ascending order in one vector accumulator,
// then adds the offsets' term, whatever the other rows of the call are.
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

// The weights this path serves: whole 32-value blocks, at least one full tile of rows, and groups
// of a power of two of blocks or one group per row (per channel): the group of a block is then
// a shift, not a division.
inline bool serves(int64_t N, int64_t K, int64_t G) {
  const int64_t per_group = G / BLOCK;
  return N >= TILE_N && K % BLOCK == 0 && G % BLOCK == 0 && (G == K || (per_group & (per_group - 1)) == 0);
}

// b >> group_shift(K, G) is block b's group (a shift of 63 sends every block to group 0).
inline int group_shift(int64_t K, int64_t G) { return G == K ? 63 : __builtin_ctzll(G / BLOCK); }

// x quantized per 32-value block: q int16 [M, K], scale d [M, K/32], and per weight group of
// G values, the sum of the dequantized activations d * sum(q) [M, K/G] (what the group's offset
// multiplies).
struct QuantizedRows {
  std::vector<int16_t> q;
  std::vector<float> d, group_sum;
};

void quantize_row(const float* x, int64_t K, int64_t G, int16_t* q, float* d, float* group_sum) {
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
    const int64_t g = b * BLOCK / G;
    group_sum[g] = (b * BLOCK % G == 0 ? 0.f : group_sum[g]) + scale * static_cast<float>(sum);
  }
}

inline QuantizedRows quantize_rows(const float* x, int64_t M, int64_t K, int64_t G) {
  QuantizedRows rows{std::vector<int16_t>(M * K), std::vector<float>(M * K / BLOCK), std::vector<float>(M * K / G)};
  for (int64_t m = 0; m < M; ++m)
    quantize_row(x + m * K, K, G, rows.q.data() + m * K, rows.d.data() + m * K / BLOCK,
                 rows.group_sum.data() + m * K / G);
  return rows;
}

// Int4: unpacked values q in 0..15 with w = scale * q + offset per group.
struct Int4Format {
  static constexpr bool has_offset = true;
  static constexpr int64_t max_rows = 6;
  const uint8_t* packed;
  const float* scales;
  const float* offsets;
  int64_t K, G;

#ifdef SGL_AVX2
  // The block's 32 values as int16, values 0..15 in `lo` and 16..31 in `hi` (natural order):
  // byte j widened to a 16-bit lane holds value j in bits 0-3 and value j + 16 in bits 4-7.
  static constexpr int64_t block_bytes = BLOCK / 2;
  const char* block_address(int64_t n, int64_t b) const {
    return reinterpret_cast<const char*>(packed + n * (K / 2) + b * block_bytes);
  }
  void unpack(int64_t n, int64_t b, __m256i& lo, __m256i& hi) const {
    const __m256i bytes = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block_address(n, b))));
    lo = _mm256_and_si256(bytes, _mm256_set1_epi16(0x0F));
    hi = _mm256_srli_epi16(bytes, 4);
  }
#endif
  int32_t value(int64_t n, int64_t k) const {
    const uint8_t byte = packed[n * (K / 2) + k / BLOCK * (BLOCK / 2) + k % (BLOCK / 2)];
    return k % BLOCK < BLOCK / 2 ? byte & 0x0F : byte >> 4;
  }
};

struct Int8Format {
  static constexpr bool has_offset = false;
  static constexpr int64_t max_rows = 8;
  const int8_t* q;
  const float* scales;
  int64_t K, G;

#ifdef SGL_AVX2
  static constexpr int64_t block_bytes = BLOCK;
  const char* block_address(int64_t n, int64_t b) const { return reinterpret_cast<const char*>(q + n * K + b * BLOCK); }
  void unpack(int64_t n, int64_t b, __m256i& lo, __m256i& hi) const {
    const char* p = block_address(n, b);
    lo = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    hi = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)));
  }
#endif
  int32_t value(int64_t n, int64_t k) const { return q[n * K + k]; }
};


#ifdef SGL_AVX2
// acc + offsets[g] * group_sum[g] lane-wise over g < groups (the last partial 8 masked).
inline __m256 add_offset_terms(__m256 acc, const float* offsets, const float* group_sum, int64_t groups) {
  int64_t g = 0;
  for (; g + 8 <= groups; g += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(offsets + g), _mm256_loadu_ps(group_sum + g), acc);
  if (g < groups) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(groups - g)), lane);
    acc = _mm256_fmadd_ps(_mm256_maskload_ps(offsets + g, mask), _mm256_maskload_ps(group_sum + g, mask), acc);
  }
  return acc;
}

// The four horizontal sums [sum(v[0]), sum(v[1]), sum(v[2]), sum(v[3])]: one fixed tree each.
static_assert(TILE_N == 4, "hsum4 reduces one tile");
inline __m128 hsum4(const __m256 v[TILE_N]) {
  const __m256 pairs = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
  return _mm_add_ps(_mm256_castps256_ps128(pairs), _mm256_extractf128_ps(pairs, 1));
}
#else
inline float offset_terms(const float* offsets, const float* group_sum, int64_t groups) {
  float total = 0.f;
  for (int64_t g = 0; g < groups; ++g) total = std::fma(offsets[g], group_sum[g], total);
  return total;
}
#endif

// y[m + i, n0 + r] for i < ROWS, r < TILE_N: each weight block is unpacked once for the ROWS
// input rows, and each input block loaded once for the TILE_N weight rows.
template <int ROWS, typename Format>
void tile(const Format& w, const QuantizedRows& x, int64_t m, int64_t n0, float* y, int64_t N) {
  const int64_t blocks = w.K / BLOCK, groups = w.K / w.G, per_group = w.G / BLOCK;
#ifdef SGL_AVX2
  const int shift = group_shift(w.K, w.G);
  // The next tile's rows, fetched a cache line ahead of use: measured 1.3x on 2 threads streaming
  // from DRAM, where the hardware prefetcher alone fell behind four interleaved row streams.
  const int64_t ahead = n0 + 2 * TILE_N <= N ? TILE_N : 0;
  constexpr int64_t blocks_per_line = 64 / Format::block_bytes;
  // The next tile's scales (and offsets): TILE_N consecutive rows of them are one span.
  for (int64_t line = 0; line < TILE_N * groups; line += 64 / sizeof(float)) {
    _mm_prefetch(reinterpret_cast<const char*>(w.scales + (n0 + ahead) * groups + line), _MM_HINT_T0);
    if constexpr (Format::has_offset)
      _mm_prefetch(reinterpret_cast<const char*>(w.offsets + (n0 + ahead) * groups + line), _MM_HINT_T0);
  }
  __m256 acc[ROWS][TILE_N];
  for (int i = 0; i < ROWS; ++i)
    for (int r = 0; r < TILE_N; ++r) acc[i][r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    if (b % blocks_per_line == 0)
      for (int r = 0; r < TILE_N; ++r) _mm_prefetch(w.block_address(n0 + ahead + r, b), _MM_HINT_T0);
    __m256i x_lo[ROWS], x_hi[ROWS];
    __m256 dx[ROWS];
    for (int i = 0; i < ROWS; ++i) {
      const int16_t* xb = x.q.data() + (m + i) * w.K + b * BLOCK;
      x_lo[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb));
      x_hi[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + 16));
      dx[i] = _mm256_broadcast_ss(x.d.data() + (m + i) * blocks + b);
    }
    for (int r = 0; r < TILE_N; ++r) {
      __m256i lo, hi;
      w.unpack(n0 + r, b, lo, hi);
      const __m256 scale = _mm256_broadcast_ss(w.scales + (n0 + r) * groups + (b >> shift));
      for (int i = 0; i < ROWS; ++i) {
        const __m256i dot = _mm256_add_epi32(_mm256_madd_epi16(lo, x_lo[i]), _mm256_madd_epi16(hi, x_hi[i]));
        acc[i][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(scale, dx[i]), acc[i][r]);
      }
    }
  }
  for (int i = 0; i < ROWS; ++i) {
    if constexpr (Format::has_offset)
      for (int r = 0; r < TILE_N; ++r)
        acc[i][r] = add_offset_terms(acc[i][r], w.offsets + (n0 + r) * groups, x.group_sum.data() + (m + i) * groups, groups);
    _mm_storeu_ps(y + (m + i) * N + n0, hsum4(acc[i]));
  }
#else
  for (int i = 0; i < ROWS; ++i) {
    for (int r = 0; r < TILE_N; ++r) {
      float total = 0.f;
      for (int64_t b = 0; b < blocks; ++b) {
        const int16_t* xb = x.q.data() + (m + i) * w.K + b * BLOCK;
        int32_t dot = 0;
        for (int64_t j = 0; j < BLOCK; ++j) dot += w.value(n0 + r, b * BLOCK + j) * xb[j];
        const float step = w.scales[(n0 + r) * groups + b / per_group] * x.d[(m + i) * blocks + b];
        total = std::fma(static_cast<float>(dot), step, total);
      }
      if constexpr (Format::has_offset)
        total += offset_terms(w.offsets + (n0 + r) * groups, x.group_sum.data() + (m + i) * groups, groups);
      y[(m + i) * N + n0 + r] = total;
    }
  }
#endif
}

// y[M, N] (row-major, preallocated) for x[M, K]; `serves(N, K, G)` must hold. Rows go in pairs
// and a last single row: both compute each output the same way, so a row's output does not
// depend on the other rows of the call.
template <typename Format>
void matmul(const float* x, int64_t M, const Format& w, int64_t N, float* y) {
  const QuantizedRows xq = quantize_rows(x, M, w.K, w.G);
  const int64_t tiles = (N + TILE_N - 1) / TILE_N;
  // Enough tiles per task to amortize scheduling, few enough to balance across threads.
  const int64_t grain = std::max<int64_t>(1, std::min<int64_t>(64, tiles / (4 * at::get_num_threads())));
  at::parallel_for(0, tiles, grain, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      // A ragged last tile overlaps the one before it: the shared outputs get the same values.
      const int64_t n0 = std::min(t * TILE_N, N - TILE_N);
      int64_t m = 0;
      for (; m + 2 <= M; m += 2) tile<2>(w, xq, m, n0, y, N);
      if (m < M) tile<1>(w, xq, m, n0, y, N);
    }
  });
}

}  // namespace sgl_int16_activations
