// Weight-only quantized linear for the host: y[M, N] = x[M, K] @ dequant(W)[N, K]^T (+ bias).
//
// Formats (the layouts of sglang.ops.quant):
//   int4, group G (a multiple of 32): packed uint8 [N, K/2]; each 32-value sub-block is 16 bytes,
//     byte j holding value j in its low nibble and value j+16 in its high nibble (GGUF's Q4_1
//     layout); w = scale * q + offset, q in 0..15, scale/offset float32 [N, K/G].
//   int8, group G (a multiple of 8; G = K is per channel): int8 [N, K]; w = scale * q.
//
// Two kernels, by the number of input rows M:
// - M up to the format's max_rows (decode): int16_activations.h, the activations quantized per
//   block and integer dot products (at one or a few rows the float conversion of every weight,
//   not memory, was the bound).
// - more rows (prefill, large decode batches): a tile of TILE_N output rows is dequantized into
//   a float buffer that stays in L1, then every input row is multiplied against it (two input
//   rows at a time, so each weight load feeds two FMAs). Dequantization is exact float32
//   arithmetic (scale * q + offset, one fused multiply-add), the same values the reference
//   computes; only the summation order differs.
// Within each kernel an output row does not depend on the other rows of the call.
#include "int16_activations.h"

namespace {

constexpr int TILE_N = 4;

#ifdef SGL_AVX2
// The 32 weights of one int4 block as four 8-lane float vectors: q * scale + offset (one rounding).
inline void int4_block(const uint8_t* b, float sc, float of, __m256 out[4]) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b));
  const __m128i mask = _mm_set1_epi8(0x0F);
  const __m128i lo = _mm_and_si128(bytes, mask);
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
  const __m256 vs = _mm256_set1_ps(sc), vo = _mm256_set1_ps(of);
  const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
  for (int i = 0; i < 4; ++i) out[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(parts[i])), vs, vo);
}

inline __m256 int8_lanes(const int8_t* p, float sc) {
  const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes)), _mm256_set1_ps(sc));
}
#endif

// Dequantize rows [n0, n0 + rows) of an int4 weight into buf[rows][K].
void dequant_int4(const uint8_t* packed, const float* scales, const float* offsets, int64_t K, int64_t G,
                  int64_t n0, int rows, float* buf) {
  const int64_t groups = K / G;
  for (int r = 0; r < rows; ++r) {
    const uint8_t* p = packed + (n0 + r) * (K / 2);
    const float* s = scales + (n0 + r) * groups;
    const float* o = offsets + (n0 + r) * groups;
    float* out = buf + r * K;
    for (int64_t k = 0; k < K; k += 32) {
      const float sc = s[k / G], of = o[k / G];
      const uint8_t* b = p + k / 2;
#ifdef SGL_AVX2
      __m256 w[4];
      int4_block(b, sc, of, w);
      for (int i = 0; i < 4; ++i) _mm256_storeu_ps(out + k + 8 * i, w[i]);
#else
      for (int j = 0; j < 16; ++j) {
        out[k + j] = std::fma(static_cast<float>(b[j] & 0x0F), sc, of);
        out[k + j + 16] = std::fma(static_cast<float>(b[j] >> 4), sc, of);
      }
#endif
    }
  }
}

void dequant_int8(const int8_t* q, const float* scales, int64_t K, int64_t G, int64_t n0, int rows, float* buf) {
  const int64_t groups = K / G;
  for (int r = 0; r < rows; ++r) {
    const int8_t* p = q + (n0 + r) * K;
    const float* s = scales + (n0 + r) * groups;
    float* out = buf + r * K;
    for (int64_t k = 0; k < K; k += 8) {
      const float sc = s[k / G];
#ifdef SGL_AVX2
      _mm256_storeu_ps(out + k, int8_lanes(p + k, sc));
#else
      for (int j = 0; j < 8; ++j) out[k + j] = static_cast<float>(p[k + j]) * sc;
#endif
    }
  }
}

#ifdef SGL_AVX2
using sgl_int16_activations::hsum;
#endif

// y[m, n0 + r] = dot(x[m], buf[r]) for every m and r < rows (K a multiple of 8).
template <int ROWS>
void tile_matmul(const float* x, int64_t M, int64_t K, const float* buf, float* y, int64_t N, int64_t n0) {
  int64_t m = 0;
#ifdef SGL_AVX2
  for (; m + 2 <= M; m += 2) {
    const float* x0 = x + m * K;
    const float* x1 = x0 + K;
    __m256 a0[ROWS], a1[ROWS];
    for (int r = 0; r < ROWS; ++r) a0[r] = a1[r] = _mm256_setzero_ps();
    for (int64_t k = 0; k < K; k += 8) {
      const __m256 v0 = _mm256_loadu_ps(x0 + k), v1 = _mm256_loadu_ps(x1 + k);
      for (int r = 0; r < ROWS; ++r) {
        const __m256 w = _mm256_loadu_ps(buf + r * K + k);
        a0[r] = _mm256_fmadd_ps(v0, w, a0[r]);
        a1[r] = _mm256_fmadd_ps(v1, w, a1[r]);
      }
    }
    for (int r = 0; r < ROWS; ++r) {
      y[m * N + n0 + r] = hsum(a0[r]);
      y[(m + 1) * N + n0 + r] = hsum(a1[r]);
    }
  }
  for (; m < M; ++m) {
    const float* x0 = x + m * K;
    __m256 a0[ROWS];
    for (int r = 0; r < ROWS; ++r) a0[r] = _mm256_setzero_ps();
    for (int64_t k = 0; k < K; k += 8) {
      const __m256 v0 = _mm256_loadu_ps(x0 + k);
      for (int r = 0; r < ROWS; ++r) a0[r] = _mm256_fmadd_ps(v0, _mm256_loadu_ps(buf + r * K + k), a0[r]);
    }
    for (int r = 0; r < ROWS; ++r) y[m * N + n0 + r] = hsum(a0[r]);
  }
#else
  for (; m < M; ++m) {
    for (int r = 0; r < ROWS; ++r) {
      float acc = 0.f;
      for (int64_t k = 0; k < K; ++k) acc += x[m * K + k] * buf[r * K + k];
      y[m * N + n0 + r] = acc;
    }
  }
#endif
}

namespace q16 = sgl_int16_activations;

template <typename Dequant, typename Format>
torch::Tensor run(const torch::Tensor& x, int64_t N, const c10::optional<torch::Tensor>& bias, Dequant dequant,
                  const Format& format) {
  TORCH_CHECK(x.scalar_type() == torch::kFloat32, "quantized linear: x must be float32");
  const auto shape = x.sizes().vec();
  const int64_t K = shape.back();
  const torch::Tensor x2 = x.reshape({-1, K}).contiguous();
  const int64_t M = x2.size(0);
  std::vector<int64_t> out_shape(shape.begin(), shape.end());
  out_shape.back() = N;
  torch::Tensor y = torch::empty({M, N}, x.options());
  const float* xp = x2.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  if (M <= Format::max_rows && q16::serves(N, K, format.G)) {
    q16::matmul(xp, M, format, N, yp);
    if (bias.has_value()) y.add_(bias.value());
    return y.reshape(out_shape);
  }
  const int64_t tiles = (N + TILE_N - 1) / TILE_N;
  // Enough tiles per task to amortize scheduling, few enough to balance across threads.
  const int64_t grain = std::max<int64_t>(1, std::min<int64_t>(64, tiles / (4 * at::get_num_threads())));
  at::parallel_for(0, tiles, grain, [&](int64_t begin, int64_t end) {
    std::vector<float> buf(TILE_N * K);
    for (int64_t t = begin; t < end; ++t) {
      const int64_t n0 = t * TILE_N;
      const int rows = static_cast<int>(std::min<int64_t>(TILE_N, N - n0));
      dequant(n0, rows, buf.data());
      if (rows == TILE_N) {
        tile_matmul<TILE_N>(xp, M, K, buf.data(), yp, N, n0);
      } else {
        for (int r = 0; r < rows; ++r) tile_matmul<1>(xp, M, K, buf.data() + r * K, yp, N, n0 + r);
      }
    }
  });
  if (bias.has_value()) y.add_(bias.value());
  return y.reshape(out_shape);
}

torch::Tensor int4_linear(const torch::Tensor& x, const torch::Tensor& packed, const torch::Tensor& scales,
                          const torch::Tensor& offsets, int64_t group, const c10::optional<torch::Tensor>& bias) {
  const int64_t N = packed.size(0), K = packed.size(1) * 2;
  TORCH_CHECK(x.size(-1) == K && K % 32 == 0 && group % 32 == 0 && K % group == 0, "int4_linear: bad shapes");
  TORCH_CHECK(packed.is_contiguous() && scales.is_contiguous() && offsets.is_contiguous(), "int4_linear: layout");
  const uint8_t* p = packed.data_ptr<uint8_t>();
  const float* s = scales.data_ptr<float>();
  const float* o = offsets.data_ptr<float>();
  return run(
      x, N, bias, [=](int64_t n0, int rows, float* buf) { dequant_int4(p, s, o, K, group, n0, rows, buf); },
      q16::Int4Format{p, s, o, K, group});
}

torch::Tensor int8_linear(const torch::Tensor& x, const torch::Tensor& qweight, const torch::Tensor& scales,
                          int64_t group, const c10::optional<torch::Tensor>& bias) {
  const int64_t N = qweight.size(0), K = qweight.size(1);
  TORCH_CHECK(x.size(-1) == K && group % 8 == 0 && K % group == 0, "int8_linear: bad shapes");
  TORCH_CHECK(qweight.is_contiguous() && scales.is_contiguous(), "int8_linear: layout");
  const int8_t* q = qweight.data_ptr<int8_t>();
  const float* s = scales.data_ptr<float>();
  return run(
      x, N, bias, [=](int64_t n0, int rows, float* buf) { dequant_int8(q, s, K, group, n0, rows, buf); },
      q16::Int8Format{q, s, K, group});
}

}  // namespace

TORCH_LIBRARY(sglang_cpu_quant, m) {
  m.def("int4_linear(Tensor x, Tensor packed, Tensor scales, Tensor offsets, int group, Tensor? bias) -> Tensor");
  m.def("int8_linear(Tensor x, Tensor qweight, Tensor scales, int group, Tensor? bias) -> Tensor");
}

TORCH_LIBRARY_IMPL(sglang_cpu_quant, CPU, m) {
  m.impl("int4_linear", &int4_linear);
  m.impl("int8_linear", &int8_linear);
}
