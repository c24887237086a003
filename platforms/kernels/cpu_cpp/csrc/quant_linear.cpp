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
//   not memory, was the bound). It reads the weight's tile records (int4_tiles / int8_tiles,
//   built once per weight by the caller), which hold the same values in one stream per tile.
// - more rows (prefill, large decode batches): a tile of NR output rows is dequantized and
//   transposed into a float buffer [K][NR] (L1/L2-resident), then input rows go through it MR at a
//   time in a register-blocked micro-kernel: per k, two vector loads of the tile and MR
//   broadcasts feed 2 * MR FMAs into accumulators that are the outputs themselves (no horizontal
//   sums). Dequantization is exact float32 arithmetic (scale * q + offset, one fused
//   multiply-add), the same values the reference computes; only the summation order differs.
// Within each kernel an output row does not depend on the other rows of the call (the float
// kernel sums every output in k order, one FMA per k, whatever MR block it falls in).
#include "ops.h"
#include "int16_activations.h"
#include <ATen/ops/empty.h>
#include <ATen/ops/equal.h>
#include <ATen/record_function.h>
#include <torch/library.h>

namespace {

#ifdef SGL_AVX2
// The micro-kernel's float vectors: 16 lanes where the build may use AVX-512 (twice the
// multiply-adds per instruction), else 8. Each output's sum is the same chain of FMAs either way.
#if defined(__AVX512F__)
using Lanes = __m512;
inline Lanes lanes_zero() { return _mm512_setzero_ps(); }
inline Lanes lanes_load(const float* p) { return _mm512_loadu_ps(p); }
inline Lanes lanes_broadcast(const float* p) { return _mm512_set1_ps(*p); }
inline Lanes lanes_fmadd(Lanes a, Lanes b, Lanes c) { return _mm512_fmadd_ps(a, b, c); }
inline void lanes_store(float* p, Lanes v) { _mm512_store_ps(p, v); }
#else
using Lanes = __m256;
inline Lanes lanes_zero() { return _mm256_setzero_ps(); }
inline Lanes lanes_load(const float* p) { return _mm256_loadu_ps(p); }
inline Lanes lanes_broadcast(const float* p) { return _mm256_broadcast_ss(p); }
inline Lanes lanes_fmadd(Lanes a, Lanes b, Lanes c) { return _mm256_fmadd_ps(a, b, c); }
inline void lanes_store(float* p, Lanes v) { _mm256_store_ps(p, v); }
#endif
constexpr int LANES = sizeof(Lanes) / sizeof(float);
#else
constexpr int LANES = 8;
#endif
constexpr int NR = 2 * LANES;  // output rows of a dequantized tile: two vectors per k
constexpr int MR = 6;          // input rows of the micro-kernel: 12 accumulators, 2 tile vectors, 1 broadcast

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

// dst[c * dst_stride + r] = src[r * src_stride + c] for an 8 x 8 block.
inline void transpose8(const float* src, int64_t src_stride, float* dst, int64_t dst_stride) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * src_stride);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(dst + i * dst_stride, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
    _mm256_storeu_ps(dst + (i + 4) * dst_stride, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
  }
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

// tile[k][r] = rows[r][k] for r < NR, k < K (K a multiple of 8).
void transpose_tile(const float* rows, int64_t K, float* tile) {
  for (int64_t k = 0; k < K; k += 8)
    for (int r = 0; r < NR; r += 8) {
#ifdef SGL_AVX2
      transpose8(rows + r * K + k, K, tile + k * NR + r, NR);
#else
      for (int i = 0; i < 8; ++i)
        for (int j = 0; j < 8; ++j) tile[(k + j) * NR + r + i] = rows[(r + i) * K + k + j];
#endif
    }
}

// y[m + i, n0 + c] = sum_k x[m + i, k] * tile[k][c] for i < R, c < cols (cols <= NR).
template <int R>
void micro_kernel(const float* x, int64_t K, const float* tile, float* y, int64_t N, int64_t n0, int cols) {
  alignas(64) float out[R][NR];
#ifdef SGL_AVX2
  // One flat array, loops unrolled by pragma: GCC otherwise kept a 2-D accumulator array in
  // registers and stored it back to the stack every k (12 stores per 12 FMAs).
  Lanes acc[2 * R];
#pragma GCC unroll 12
  for (int i = 0; i < 2 * R; ++i) acc[i] = lanes_zero();
  for (int64_t k = 0; k < K; ++k) {
    const Lanes b0 = lanes_load(tile + k * NR), b1 = lanes_load(tile + k * NR + LANES);
#pragma GCC unroll 6
    for (int i = 0; i < R; ++i) {
      const Lanes a = lanes_broadcast(x + i * K + k);
      acc[2 * i] = lanes_fmadd(a, b0, acc[2 * i]);
      acc[2 * i + 1] = lanes_fmadd(a, b1, acc[2 * i + 1]);
    }
  }
#pragma GCC unroll 6
  for (int i = 0; i < R; ++i) {
    lanes_store(out[i], acc[2 * i]);
    lanes_store(out[i] + LANES, acc[2 * i + 1]);
  }
#else
  for (int i = 0; i < R; ++i)
    for (int c = 0; c < NR; ++c) {
      float total = 0.f;
      for (int64_t k = 0; k < K; ++k) total = std::fma(x[i * K + k], tile[k * NR + c], total);
      out[i][c] = total;
    }
#endif
  for (int i = 0; i < R; ++i) std::copy_n(out[i], cols, y + i * N + n0);
}

// y[M, N] for every row of x against one tile (the rows' MR blocks, then the remainder).
void tile_rows(const float* x, int64_t M, int64_t K, const float* tile, float* y, int64_t N, int64_t n0, int cols) {
  int64_t m = 0;
  for (; m + MR <= M; m += MR) micro_kernel<MR>(x + m * K, K, tile, y + m * N, N, n0, cols);
  switch (M - m) {
    case 5: micro_kernel<5>(x + m * K, K, tile, y + m * N, N, n0, cols); break;
    case 4: micro_kernel<4>(x + m * K, K, tile, y + m * N, N, n0, cols); break;
    case 3: micro_kernel<3>(x + m * K, K, tile, y + m * N, N, n0, cols); break;
    case 2: micro_kernel<2>(x + m * K, K, tile, y + m * N, N, n0, cols); break;
    case 1: micro_kernel<1>(x + m * K, K, tile, y + m * N, N, n0, cols); break;
    default: break;
  }
}

namespace q16 = sgl_int16_activations;

// The int16-activation kernel on a weight's records, for each record layout pack_tiles makes.
template <int Bits>
void int16_matmul(const float* x, int64_t M, const at::Tensor& tiles, int64_t N, float* y) {
  using Half = q16::Tiles<Bits, c10::Half>;
  using Full = q16::Tiles<Bits, float>;
  const uint8_t* records = tiles.data_ptr<uint8_t>();
  const int64_t blocks = tiles.size(1), bytes = tiles.size(2);
  if (bytes == Half::record_bytes) return q16::matmul(x, M, Half{records, blocks}, N, y);
  TORCH_CHECK(bytes == Full::record_bytes, "quantized linear: tiles are not int", Bits, " records");
  q16::matmul(x, M, Full{records, blocks}, N, y);
}

// y: x's shape with N last, contiguous (allocated in its final shape, so no reshape calls: at
// decode each costs about as much as a small kernel).
at::Tensor linear_output(const at::Tensor& x, int64_t N) {
  std::vector<int64_t> out_shape = x.sizes().vec();
  out_shape.back() = N;
  return at::empty(out_shape, x.options());
}

template <int Bits, typename Dequant>
void run(const at::Tensor& x, int64_t N, int64_t group, const at::Tensor& tiles, const std::optional<at::Tensor>& bias,
         Dequant dequant, at::Tensor& y) {
  TORCH_CHECK(x.scalar_type() == at::kFloat, "quantized linear: x must be float32");
  const int64_t K = x.size(-1);
  TORCH_CHECK(K % 8 == 0, "quantized linear: in_features must be a multiple of 8");
  // Contiguous x is rows of K whatever its leading dimensions.
  const at::Tensor x2 = x.contiguous();
  const int64_t M = x2.numel() / K;
  TORCH_CHECK(y.is_contiguous() && y.numel() == M * N, "quantized linear: output shape");
  const float* xp = x2.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  if (M <= q16::Tiles<Bits, float>::max_rows && q16::serves(K, group)) {
    TORCH_CHECK(tiles.dim() == 3 && tiles.size(0) * q16::TILE_N >= N && tiles.size(1) * q16::BLOCK == K,
                "quantized linear: tiles do not match the weight");
    int16_matmul<Bits>(xp, M, tiles.contiguous(), N, yp);
  } else {
    const int64_t float_tiles = (N + NR - 1) / NR;
    at::parallel_for(0, float_tiles, 1, [&](int64_t begin, int64_t end) {
      // A ragged last tile's extra columns are computed from whatever its buffer holds and never stored.
      std::vector<float> rows(NR * K, 0.f), tile(K * NR);
      for (int64_t t = begin; t < end; ++t) {
        const int64_t n0 = t * NR;
        const int cols = static_cast<int>(std::min<int64_t>(NR, N - n0));
        dequant(n0, cols, rows.data());
        transpose_tile(rows.data(), K, tile.data());
        tile_rows(xp, M, K, tile.data(), yp, N, n0, cols);
      }
    });
  }
  if (bias.has_value()) y.add_(bias.value());
}

// Whether every value survives a round trip through float16 (then the records store float16).
bool exact_in_half(const at::Tensor& values) {
  return values.numel() == 0 || at::equal(values.to(at::kHalf).to(at::kFloat), values);
}

template <int Bits>
at::Tensor pack_records(const at::Tensor& data, const at::Tensor& scales, const float* offsets, bool half,
                        int64_t K, int64_t group) {
  TORCH_CHECK(data.is_contiguous() && scales.is_contiguous(), "tiles: layout");
  // No records where the int16 kernel does not serve the weight: the float kernel takes every call.
  if (!q16::serves(K, group)) return at::empty({0, 0, 0}, at::kByte);
  const uint8_t* d = static_cast<const uint8_t*>(data.data_ptr());
  const float* s = scales.data_ptr<float>();
  const int64_t N = data.size(0);
  return half ? q16::pack<q16::Tiles<Bits, c10::Half>>(d, s, offsets, N, K, group)
              : q16::pack<q16::Tiles<Bits, float>>(d, s, offsets, N, K, group);
}

}  // namespace

namespace sgl_cpu_cpp {

at::Tensor int4_linear(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& scales,
                       const at::Tensor& offsets, int64_t group, const at::Tensor& tiles,
                       const std::optional<at::Tensor>& bias) {
  at::Tensor y = linear_output(x, packed.size(0));
  int4_linear_into(x, packed, scales, offsets, group, tiles, bias, y);
  return y;
}

void int4_linear_into(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& scales,
                      const at::Tensor& offsets, int64_t group, const at::Tensor& tiles,
                      const std::optional<at::Tensor>& bias, at::Tensor& y) {
  RECORD_FUNCTION("sglang_cpu_cpp::int4_linear", std::vector<c10::IValue>());
  const int64_t N = packed.size(0), K = packed.size(1) * 2;
  TORCH_CHECK(x.size(-1) == K && K % 32 == 0 && group % 32 == 0 && K % group == 0, "int4_linear: bad shapes");
  TORCH_CHECK(packed.is_contiguous() && scales.is_contiguous() && offsets.is_contiguous(), "int4_linear: layout");
  const uint8_t* p = packed.data_ptr<uint8_t>();
  const float* s = scales.data_ptr<float>();
  const float* o = offsets.data_ptr<float>();
  run<4>(
      x, N, group, tiles, bias,
      [=](int64_t n0, int rows, float* buf) { dequant_int4(p, s, o, K, group, n0, rows, buf); }, y);
}

at::Tensor int8_linear(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& scales,
                       int64_t group, const at::Tensor& tiles, const std::optional<at::Tensor>& bias) {
  at::Tensor y = linear_output(x, qweight.size(0));
  int8_linear_into(x, qweight, scales, group, tiles, bias, y);
  return y;
}

void int8_linear_into(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& scales, int64_t group,
                      const at::Tensor& tiles, const std::optional<at::Tensor>& bias, at::Tensor& y) {
  RECORD_FUNCTION("sglang_cpu_cpp::int8_linear", std::vector<c10::IValue>());
  const int64_t N = qweight.size(0), K = qweight.size(1);
  TORCH_CHECK(x.size(-1) == K && group % 8 == 0 && K % group == 0, "int8_linear: bad shapes");
  TORCH_CHECK(qweight.is_contiguous() && scales.is_contiguous(), "int8_linear: layout");
  const int8_t* q = qweight.data_ptr<int8_t>();
  const float* s = scales.data_ptr<float>();
  run<8>(
      x, N, group, tiles, bias, [=](int64_t n0, int rows, float* buf) { dequant_int8(q, s, K, group, n0, rows, buf); },
      y);
}

at::Tensor int4_tiles(const at::Tensor& packed, const at::Tensor& scales, const at::Tensor& offsets,
                      int64_t group) {
  TORCH_CHECK(offsets.is_contiguous(), "int4_tiles: layout");
  const bool half = exact_in_half(scales) && exact_in_half(offsets);
  return pack_records<4>(packed, scales, offsets.data_ptr<float>(), half, packed.size(1) * 2, group);
}

at::Tensor int8_tiles(const at::Tensor& qweight, const at::Tensor& scales, int64_t group) {
  return pack_records<8>(qweight, scales, nullptr, exact_in_half(scales), qweight.size(1), group);
}

}  // namespace sgl_cpu_cpp

TORCH_LIBRARY(sglang_cpu_cpp, m) {
  m.def("int4_linear(Tensor x, Tensor packed, Tensor scales, Tensor offsets, int group, Tensor tiles, Tensor? bias)"
        " -> Tensor");
  m.def("int8_linear(Tensor x, Tensor qweight, Tensor scales, int group, Tensor tiles, Tensor? bias) -> Tensor");
  m.def("int4_tiles(Tensor packed, Tensor scales, Tensor offsets, int group) -> Tensor");
  m.def("int8_tiles(Tensor qweight, Tensor scales, int group) -> Tensor");
}

TORCH_LIBRARY_IMPL(sglang_cpu_cpp, CPU, m) {
  m.impl("int4_linear", &sgl_cpu_cpp::int4_linear);
  m.impl("int8_linear", &sgl_cpu_cpp::int8_linear);
  m.impl("int4_tiles", &sgl_cpu_cpp::int4_tiles);
  m.impl("int8_tiles", &sgl_cpu_cpp::int8_tiles);
}
