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
// With many rows the float kernel (a dequantized tile reused by every row) is faster, so
// quant_linear.cpp uses this one only up to `max_rows`: 32. Measured on the embedded model's
// shapes, one thread, against the float kernel: int4 layers 1.2x faster at 16 rows, 1.07x at 24,
// level at 32; the int8 lm_head 1.4x faster at 32. So a decode batch of up to 32 rows and a
// speculative verify step are one regime: a row's output is the same bits in any of them.
//
// The weights are read from tile records (`pack`, once per weight): for each tile of TILE_N = 4
// output rows and each 32-value block, one record holds the 4 rows' block data, then their 4
// scales, then (int4) their 4 offsets. A tile's records are consecutive, so a thread reads one
// sequential stream, not 4 rows x (data, scales, offsets) streams: measured 1.4x on the embedded
// model's layers from DRAM. The records sit on huge pages (record_arena.h). A group of several
// blocks repeats its scale in each record. Scales are stored as float16 where every one of the
// weight's scales and offsets converts exactly (a GGUF's are float16 to begin with), else
// float32: either way they are the weight's exact values.
//
// Invariant: every output (m, n) sums its even blocks in ascending order in one vector accumulator
// and its odd blocks in another (each block's scaled dot product, then its offset term), and adds
// the two at the end, whatever the other rows of the call are.
//
// Wider builds (build.py `compile_flags`, by the CPU) keep every bit: with VNNI a multiply-add and
// its add are one instruction (`madd_add`); with AVX-512 a block pair's two records go through
// one 512-bit vector, the even block's accumulator in its low half and the odd's in its high
// (`add_record_pair`).
#pragma once
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <c10/util/Half.h>
#include <cmath>
#include <cstring>
#include <vector>
#include "chunk_queue.h"
#include "record_arena.h"
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define SGL_AVX2 1
#if defined(__AVX512F__) && defined(__AVX512BW__)
// Two records at once, one in each 256-bit half of a 512-bit vector (`add_record_pair`).
#define SGL_AVX512 1
#endif
#endif

namespace sgl_int16_activations {

constexpr int64_t BLOCK = 32;
constexpr int TILE_N = 4;  // weight rows of a record: each x block is loaded once for them
// How far ahead of use the records are prefetched: a few cache lines did not cover DRAM latency
// (1.2x slower); 1280 to 5120 bytes measured the same.
constexpr int64_t PREFETCH_BYTES = 2048;

// Where value j (0..31) of a record's row r lies in its data: the data is VECTORS chunks, each
// widening to 16 int16 lanes; lane L of chunk k holds row (L / 2) % 4's value 4k + 2(L / 8) + L % 2.
// So lanes (2p, 2p + 1) of a half hold one row's pair of values, the four rows side by side: one
// madd_epi16 against the input's pair repeated four times yields four rows' partial sums at once
// (the pair products summed), and a record's 8 products add up lane-wise into every row's dot
// product, without horizontal sums.
constexpr int VECTORS = 8;
inline int64_t lane_of(int r, int64_t j) { return (j / 2 % 2) * 8 + r * 2 + j % 2; }

// The weights this path serves: whole 32-value blocks, each within one group.
inline bool serves(int64_t K, int64_t G) { return K % BLOCK == 0 && G % BLOCK == 0; }

// x quantized per 32-value block: q int16 [M, K], scale d [M, K/32], and per block the sum of
// its dequantized values d * sum(q) [M, K/32] (what the block's weight offset multiplies).
// `pairs` [M, K] (AVX2 only): each block's q with its 16 value pairs in the order 0, 2, 4, 6,
// 1, 3, 5, 7 (first 32 bytes), then 8, 10, ..., 15: pairs 2k and 2k + 1 sit at the same place of
// the two 16-byte halves, where one in-lane shuffle repeats them for record vector k.
// `repeated` [M, K/32, VECTORS] (AVX2, when asked for): those shuffles, done once per block rather
// than once per tile and block.
struct QuantizedRows {
  std::vector<int16_t> q;
  std::vector<float> d, block_sum;
  std::vector<int16_t> pairs;
  // 32-byte aligned: at malloc's 16, every other vector load spans two cache lines (0.92x).
  struct alignas(32) Vector {
    int16_t lanes[16];
  };
  std::vector<Vector> repeated;
#ifdef SGL_AVX512
  // The same for blocks 2p and 2p + 1 side by side (low and high 256 bits), for add_record_pair:
  // `pair_pairs` [M, K/64, 2] and `pair_repeated` [M, K/64, VECTORS] join the two blocks' vectors
  // of `pairs` and `repeated`; `pair_d` and `pair_sum` [M, K/64] hold each block's d (and
  // block_sum) in 8 lanes, the first block's in the low half.
  struct alignas(64) Wide {
    int16_t lanes[32];
  };
  struct alignas(64) WideFloats {
    float lanes[16];
  };
  std::vector<Wide> pair_pairs, pair_repeated;
  std::vector<WideFloats> pair_d, pair_sum;
#endif
};

inline void quantize_row(const float* x, int64_t K, int16_t* q, float* d, float* block_sum) {
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
    block_sum[b] = scale * static_cast<float>(sum);
  }
}

#ifdef SGL_AVX2
// The VECTORS inputs of one pair-ordered block: vector k holds pair 2k in its low half and pair
// 2k + 1 in its high half, each repeated four times (one per weight row of a record). Made by one
// in-lane shuffle of the block's first or second 32 bytes each.
// With 512-bit vectors, the same for two blocks at once (one per 256-bit half: the in-lane
// shuffle treats them alike).
template <int imm>
__m256i shuffle_epi32(__m256i v) {
  return _mm256_shuffle_epi32(v, imm);
}
inline __m256i load_vector(const __m256i* p) { return _mm256_load_si256(p); }
inline __m256i loadu_vector(const __m256i* p) { return _mm256_loadu_si256(p); }
#ifdef SGL_AVX512
template <int imm>
__m512i shuffle_epi32(__m512i v) {
  return _mm512_shuffle_epi32(v, static_cast<_MM_PERM_ENUM>(imm));
}
inline __m512i load_vector(const __m512i* p) { return _mm512_load_si512(p); }
inline __m512i loadu_vector(const __m512i* p) { return _mm512_loadu_si512(p); }
#endif

template <typename V>
struct ShuffledInput {
  V first, second;
  explicit ShuffledInput(const V* block) : first(loadu_vector(block)), second(loadu_vector(block + 1)) {}
  template <int k>
  V at() const {
    return shuffle_epi32<(k % 4) * 0x55>(k < 4 ? first : second);
  }
};

// The same vectors, stored by quantize_rows (`QuantizedRows::repeated`, `pair_repeated`).
template <typename V>
struct LoadedInput {
  const V* vectors;
  template <int k>
  V at() const {
    return load_vector(vectors + k);
  }
};
#endif

inline QuantizedRows quantize_rows(const float* x, int64_t M, int64_t K, bool repeat) {
  const int64_t blocks = K / BLOCK;
  QuantizedRows rows;
  rows.q.resize(M * K);
  rows.d.resize(M * blocks);
  rows.block_sum.resize(M * blocks);
  for (int64_t m = 0; m < M; ++m)
    quantize_row(x + m * K, K, rows.q.data() + m * K, rows.d.data() + m * blocks, rows.block_sum.data() + m * blocks);
#ifdef SGL_AVX2
  rows.pairs.resize(M * K);
  __m256i* out = reinterpret_cast<__m256i*>(rows.pairs.data());
  const __m256i order = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
  for (int64_t b = 0; b < M * blocks; ++b) {
    const __m256i* pairs = reinterpret_cast<const __m256i*>(rows.q.data() + b * BLOCK);
    _mm256_storeu_si256(out + 2 * b, _mm256_permutevar8x32_epi32(_mm256_loadu_si256(pairs), order));
    _mm256_storeu_si256(out + 2 * b + 1, _mm256_permutevar8x32_epi32(_mm256_loadu_si256(pairs + 1), order));
  }
  if (repeat) {
    rows.repeated.resize(M * blocks * VECTORS);
    for (int64_t b = 0; b < M * blocks; ++b) {
      const ShuffledInput input(out + 2 * b);
      __m256i* to = reinterpret_cast<__m256i*>(rows.repeated.data()) + b * VECTORS;
      to[0] = input.at<0>(), to[1] = input.at<1>(), to[2] = input.at<2>(), to[3] = input.at<3>();
      to[4] = input.at<4>(), to[5] = input.at<5>(), to[6] = input.at<6>(), to[7] = input.at<7>();
    }
  }
#ifdef SGL_AVX512
  const int64_t pairs = blocks / 2;
  const __m256i* repeated = reinterpret_cast<const __m256i*>(rows.repeated.data());
  const auto join = [](__m256i low, __m256i high) { return _mm512_inserti64x4(_mm512_castsi256_si512(low), high, 1); };
  rows.pair_pairs.resize(M * pairs * 2);
  rows.pair_d.resize(M * pairs);
  rows.pair_sum.resize(M * pairs);
  if (repeat) rows.pair_repeated.resize(M * pairs * VECTORS);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t p = 0; p < pairs; ++p) {
      const int64_t low = m * blocks + 2 * p, high = low + 1, at = m * pairs + p;
      __m512i* to = reinterpret_cast<__m512i*>(rows.pair_pairs.data()) + 2 * at;
      for (int h = 0; h < 2; ++h)
        to[h] = join(_mm256_loadu_si256(out + 2 * low + h), _mm256_loadu_si256(out + 2 * high + h));
      for (int j = 0; j < 8; ++j) {
        rows.pair_d[at].lanes[j] = rows.d[low], rows.pair_d[at].lanes[8 + j] = rows.d[high];
        rows.pair_sum[at].lanes[j] = rows.block_sum[low];
        rows.pair_sum[at].lanes[8 + j] = rows.block_sum[high];
      }
      if (!repeat) continue;
      __m512i* wide = reinterpret_cast<__m512i*>(rows.pair_repeated.data()) + at * VECTORS;
      for (int k = 0; k < VECTORS; ++k)
        wide[k] = join(repeated[low * VECTORS + k], repeated[high * VECTORS + k]);
    }
#endif
#else
  (void)repeat;  // the portable loops read q
#endif
  return rows;
}

// The record layout of Bits-bit weights with scales (and offsets) stored as Scale.
// Int4 data: 64 bytes, chunk c (16 bytes) holding vector 2c in its bytes' low nibbles and vector
// 2c + 1 in their high nibbles, q in 0..15, w = scale * q + offset. Int8 data: 128 signed bytes,
// chunk k holding vector k, w = scale * q.
template <int Bits, typename Scale>
struct Tiles {
  static_assert(Bits == 4 || Bits == 8, "int4 or int8 records");
  static constexpr bool has_offset = Bits == 4;
  static constexpr int64_t max_rows = 32;
  // Input rows from which a tile reads each input pair already repeated (`QuantizedRows::repeated`,
  // one load folded into each multiply-add) rather than shuffling it per record: shuffles and
  // multiply-adds share the vector ports. Int4 measured 1.03-1.17x faster at 1 to 8 rows, ~1.0x
  // at 12 to 32. Int8 records take twice the loads to unpack: the repeated loads measured 0.72x
  // and 0.74x at 2 and 1 rows (the lm_head load-bound) and 0.95-1.08x at 4 to 32, so int8 keeps
  // the shuffles.
  static constexpr int repeated_from_rows = Bits == 4 ? 1 : max_rows + 1;
  static constexpr int64_t data_bytes = BLOCK * Bits / 8;
  static constexpr int64_t scales_at = TILE_N * data_bytes;
  static constexpr int64_t offsets_at = scales_at + TILE_N * sizeof(Scale);
  static constexpr int64_t record_bytes = offsets_at + (has_offset ? TILE_N * sizeof(Scale) : 0);

  const uint8_t* records;
  int64_t blocks;  // records per tile: K / 32

  const uint8_t* record(int64_t tile, int64_t b) const { return records + (tile * blocks + b) * record_bytes; }
  static float scale(const uint8_t* rec, int r) { return load_scale(rec + scales_at, r); }
  static float offset(const uint8_t* rec, int r) { return load_scale(rec + offsets_at, r); }
  static void store_scale(uint8_t* p, int r, float v) {
    const Scale s(v);
    std::memcpy(p + r * sizeof(Scale), &s, sizeof(Scale));
  }
  static int32_t value(const uint8_t* rec, int r, int64_t j) {
    const int64_t k = j / 4, lane = lane_of(r, j);
    if constexpr (Bits == 8) return static_cast<int8_t>(rec[k * 16 + lane]);
    const uint8_t byte = rec[k / 2 * 16 + lane];
    return k % 2 == 0 ? byte & 0x0F : byte >> 4;
  }
  // Stores row r's value j (int4: 0..15; int8: -128..127) into its place in the record.
  static void store_value(uint8_t* rec, int r, int64_t j, int32_t q) {
    const int64_t k = j / 4, lane = lane_of(r, j);
    if constexpr (Bits == 8) {
      rec[k * 16 + lane] = static_cast<uint8_t>(static_cast<int8_t>(q));
    } else {
      uint8_t& byte = rec[k / 2 * 16 + lane];
      byte = k % 2 == 0 ? (byte & 0xF0) | q : (byte & 0x0F) | (q << 4);
    }
  }
  // Value j of weight row n in the weight's own layout (int4: byte j % 16 of the row's block,
  // low nibble for j < 16; int8: byte j).
  static int32_t source_value(const uint8_t* block, int64_t j) {
    if constexpr (Bits == 8) return static_cast<int8_t>(block[j]);
    return j < BLOCK / 2 ? block[j] & 0x0F : block[j - BLOCK / 2] >> 4;
  }

#ifdef SGL_AVX2
  // The record's VECTORS int16 vectors (the lane order of `lane_of`).
  static void unpack(const uint8_t* rec, __m256i v[VECTORS]) {
    const __m128i* data = reinterpret_cast<const __m128i*>(rec);
    for (int c = 0; c < VECTORS * Bits / 8; ++c) {
      if constexpr (Bits == 8) {
        v[c] = _mm256_cvtepi8_epi16(_mm_loadu_si128(data + c));
      } else {
        const __m256i bytes = _mm256_cvtepu8_epi16(_mm_loadu_si128(data + c));
        v[2 * c] = _mm256_and_si256(bytes, _mm256_set1_epi16(0x0F));
        v[2 * c + 1] = _mm256_srli_epi16(bytes, 4);
      }
    }
  }
#ifdef SGL_AVX512
  // The VECTORS vectors of records rec and rec + 1 (the next block's), one per 256-bit half.
  static void unpack_pair(const uint8_t* rec, __m512i v[VECTORS]) {
    const __m128i* data = reinterpret_cast<const __m128i*>(rec);
    const __m128i* next = reinterpret_cast<const __m128i*>(rec + record_bytes);
    for (int c = 0; c < VECTORS * Bits / 8; ++c) {
      const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(data + c)),
                                                   _mm_loadu_si128(next + c), 1);
      if constexpr (Bits == 8) {
        v[c] = _mm512_cvtepi8_epi16(both);
      } else {
        const __m512i bytes = _mm512_cvtepu8_epi16(both);
        v[2 * c] = _mm512_and_si512(bytes, _mm512_set1_epi16(0x0F));
        v[2 * c + 1] = _mm512_srli_epi16(bytes, 4);
      }
    }
  }
#endif
  static __m128 scales4(const uint8_t* rec) { return load4(rec + scales_at); }
  static __m128 offsets4(const uint8_t* rec) { return load4(rec + offsets_at); }
  static __m128 load4(const uint8_t* p) {
    if constexpr (std::is_same_v<Scale, float>) return _mm_loadu_ps(reinterpret_cast<const float*>(p));
    return _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  }
#endif

 private:
  static float load_scale(const uint8_t* p, int r) {
    Scale s;
    std::memcpy(&s, p + r * sizeof(Scale), sizeof(Scale));
    return static_cast<float>(s);
  }
};

// The records of a weight: data [N, K * Bits / 8] in the layout above (int4 packed, int8 values),
// scales (and offsets) float32 [N, K / G]. Returns uint8 [ceil(N / 4), K / 32, record_bytes];
// rows past N (the last tile's padding) are zero and their outputs are never stored.
template <typename T>
at::Tensor pack(const uint8_t* data, const float* scales, const float* offsets, int64_t N, int64_t K, int64_t G) {
  const int64_t tiles = (N + TILE_N - 1) / TILE_N, blocks = K / BLOCK, groups = K / G, row_bytes = K * T::data_bytes / BLOCK;
  at::Tensor out = sgl_record_arena::allocate(tiles * blocks * T::record_bytes).view({tiles, blocks, T::record_bytes});
  uint8_t* base = out.data_ptr<uint8_t>();
  at::parallel_for(0, tiles, 16, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t)
      for (int64_t b = 0; b < blocks; ++b) {
        uint8_t* rec = base + (t * blocks + b) * T::record_bytes;
        for (int r = 0; r < TILE_N && t * TILE_N + r < N; ++r) {
          const int64_t n = t * TILE_N + r, g = b * BLOCK / G;
          const uint8_t* block = data + n * row_bytes + b * T::data_bytes;
          for (int64_t j = 0; j < BLOCK; ++j) T::store_value(rec, r, j, T::source_value(block, j));
          T::store_scale(rec + T::scales_at, r, scales[n * groups + g]);
          if constexpr (T::has_offset) T::store_scale(rec + T::offsets_at, r, offsets[n * groups + g]);
        }
      }
  });
  return out;
}

#ifdef SGL_AVX2
// sums + madd_epi16(a, b): one VNNI instruction where the CPU has it (AVX-VNNI, or AVX-512 VNNI
// with its 256-bit forms), else the multiply-add and an add. The same exact int32 sums either way
// (no pair sum or total here comes near int32's range), so the bits of every output are too.
__attribute__((always_inline)) inline __m256i madd_add(__m256i sums, __m256i a, __m256i b) {
#if defined(__AVXVNNI__)
  return _mm256_dpwssd_avx_epi32(sums, a, b);
#elif defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpwssd_epi32(sums, a, b);
#else
  return _mm256_add_epi32(sums, _mm256_madd_epi16(a, b));
#endif
}
__attribute__((always_inline)) inline __m256i madd(__m256i a, __m256i b) { return _mm256_madd_epi16(a, b); }
__attribute__((always_inline)) inline __m256i add32(__m256i a, __m256i b) { return _mm256_add_epi32(a, b); }
#ifdef SGL_AVX512
__attribute__((always_inline)) inline __m512i madd_add(__m512i sums, __m512i a, __m512i b) {
#if defined(__AVX512VNNI__)
  return _mm512_dpwssd_epi32(sums, a, b);
#else
  return _mm512_add_epi32(sums, _mm512_madd_epi16(a, b));
#endif
}
__attribute__((always_inline)) inline __m512i madd(__m512i a, __m512i b) { return _mm512_madd_epi16(a, b); }
__attribute__((always_inline)) inline __m512i add32(__m512i a, __m512i b) { return _mm512_add_epi32(a, b); }
#endif

// A record's products with one input row's block (`input`: ShuffledInput or LoadedInput), summed
// lane-wise in two chains of four: lane l holds weight row l % 4's sum over half l / 4's pairs.
// Each input vector is made where it is used: made all at once, the eight of them spilled the
// record's vectors at one row (0.95x).
// With 512-bit vectors (V = __m512i), two records' products with two blocks, one per half.
template <typename V, typename Input>
__attribute__((always_inline)) inline V record_products(const V v[VECTORS], const Input& input) {
  V even = madd(v[0], input.template at<0>());
  V odd = madd(v[1], input.template at<1>());
  even = madd_add(even, v[2], input.template at<2>());
  odd = madd_add(odd, v[3], input.template at<3>());
  even = madd_add(even, v[4], input.template at<4>());
  odd = madd_add(odd, v[5], input.template at<5>());
  even = madd_add(even, v[6], input.template at<6>());
  odd = madd_add(odd, v[7], input.template at<7>());
  return add32(even, odd);
}

// Block b's record for ROWS input rows from row m: each row's scaled dot product, then its
// offset term, added into acc[i]. Inlined with a fixed `acc` (the even or the odd blocks' one).
template <int ROWS, typename T>
__attribute__((always_inline)) inline void add_record(const uint8_t* rec, const QuantizedRows& x, int64_t m, int64_t b,
                                                      int64_t blocks, __m256 (&acc)[ROWS]) {
  for (int64_t line = 0; line < T::record_bytes; line += 64)
    _mm_prefetch(reinterpret_cast<const char*>(rec + PREFETCH_BYTES + line), _MM_HINT_T0);
  const __m128 scales4 = T::scales4(rec);
  const __m256 scales = _mm256_set_m128(scales4, scales4);
  // Offsets in the low half only: each output takes its block's offset term once.
  const __m256 offsets = T::has_offset ? _mm256_castps128_ps256(T::offsets4(rec)) : _mm256_setzero_ps();
  __m256i v[VECTORS];
  T::unpack(rec, v);
  for (int i = 0; i < ROWS; ++i) {
    const int64_t at = (m + i) * blocks + b;
    __m256i sums;
    if constexpr (ROWS >= T::repeated_from_rows)
      sums = record_products(v, LoadedInput<__m256i>{reinterpret_cast<const __m256i*>(x.repeated.data()) +
                                                     at * VECTORS});
    else
      sums = record_products(v, ShuffledInput<__m256i>(reinterpret_cast<const __m256i*>(x.pairs.data()) + at * 2));
    const __m256 step = _mm256_mul_ps(scales, _mm256_set1_ps(x.d[at]));
    acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), step, acc[i]);
    if constexpr (T::has_offset) acc[i] = _mm256_fmadd_ps(offsets, _mm256_set1_ps(x.block_sum[at]), acc[i]);
  }
}
#endif

#ifdef SGL_AVX512
// add_record for blocks 2p and 2p + 1 at once: the first block's record in the low 256 bits of
// every vector, the second's in the high 256. Each lane does what add_record does in its place
// (the same products, conversion, scaling and multiply-adds), so acc[i]'s low half is the even
// blocks' accumulator and its high half the odd blocks': the same bits, half the instructions.
template <int ROWS, typename T>
__attribute__((always_inline)) inline void add_record_pair(const uint8_t* rec, const QuantizedRows& x, int64_t m,
                                                           int64_t p, int64_t pairs, __m512 (&acc)[ROWS]) {
  for (int64_t line = 0; line < 2 * T::record_bytes; line += 64)
    _mm_prefetch(reinterpret_cast<const char*>(rec + PREFETCH_BYTES + line), _MM_HINT_T0);
  const uint8_t* next = rec + T::record_bytes;
  // Each block's 4 scales twice over its half, as add_record's `scales`; offsets in the low
  // quarter of each half only, as its `offsets`.
  const __m512i spread = _mm512_setr_epi32(0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 6, 7, 4, 5, 6, 7);
  const __m512 scales =
      _mm512_permutexvar_ps(spread, _mm512_castps256_ps512(_mm256_set_m128(T::scales4(next), T::scales4(rec))));
  __m512 offsets = _mm512_setzero_ps();
  if constexpr (T::has_offset)
    offsets = _mm512_maskz_permutexvar_ps(0x0F0F, spread,
                                          _mm512_castps256_ps512(_mm256_set_m128(T::offsets4(next), T::offsets4(rec))));
  __m512i v[VECTORS];
  T::unpack_pair(rec, v);
  for (int i = 0; i < ROWS; ++i) {
    const int64_t at = (m + i) * pairs + p;
    __m512i sums;
    if constexpr (ROWS >= T::repeated_from_rows)
      sums = record_products(v, LoadedInput<__m512i>{reinterpret_cast<const __m512i*>(x.pair_repeated.data()) +
                                                     at * VECTORS});
    else
      sums = record_products(v, ShuffledInput<__m512i>(reinterpret_cast<const __m512i*>(x.pair_pairs.data()) +
                                                       at * 2));
    const __m512 step = _mm512_mul_ps(scales, _mm512_load_ps(x.pair_d[at].lanes));
    acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), step, acc[i]);
    if constexpr (T::has_offset) acc[i] = _mm512_fmadd_ps(offsets, _mm512_load_ps(x.pair_sum[at].lanes), acc[i]);
  }
}
#endif

// y[m + i, 4t + r] for i < ROWS, r < TILE_N (and 4t + r < N). Per record, the TILE_N weight rows
// are unpacked once into VECTORS int16 vectors for every input row; per input row and record,
// 8 multiply-adds and 7 adds give the four rows' integer dot products in one vector (lanes r and
// r + 4: row r's sums over the two halves of the block), then one conversion, one scaling and two
// fused multiply-adds: ~20 vector instructions per row and 128 weights. That per-row work, not
// memory, bounds this kernel from 2 rows on (at 4 rows one thread reads the weights at ~4.5 GB/s),
// so each further row costs about as much as the last (8 rows measured 1.9-2.1x 4 rows).
template <int ROWS, typename T>
void tile(const T& w, const QuantizedRows& x, int64_t m, int64_t t, float* y, int64_t N) {
  const int64_t blocks = w.blocks, K = blocks * BLOCK;
  float out[ROWS][TILE_N];
#ifdef SGL_AVX2
  // Lanes r and r + 4 of row i: output (m + i, 4t + r), summed at the end. Even and odd blocks
  // go to separate accumulators: one chain of dependent multiply-adds per row bounded one-row
  // calls by its latency. From 2 rows the blocks go in pairs, so which accumulator a block adds
  // into is known at compile time (indexed by `b & 1`, every row's accumulators live on the stack).
  __m256 acc[2][ROWS];  // the even blocks', then the odd blocks'
  for (int i = 0; i < ROWS; ++i) acc[0][i] = acc[1][i] = _mm256_setzero_ps();
  const uint8_t* rec = w.record(t, 0);
#ifdef SGL_AVX512
  {
    __m512 both[ROWS];
    for (int i = 0; i < ROWS; ++i) both[i] = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= blocks; b += 2, rec += 2 * T::record_bytes)
      add_record_pair<ROWS, T>(rec, x, m, b / 2, blocks / 2, both);
    for (int i = 0; i < ROWS; ++i) {
      acc[0][i] = _mm512_castps512_ps256(both[i]);
      acc[1][i] = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(both[i]), 1));
    }
    if (b < blocks) add_record<ROWS, T>(rec, x, m, b, blocks, acc[0]);
  }
#else
  if constexpr (ROWS > 1) {
    int64_t b = 0;
    for (; b + 2 <= blocks; b += 2, rec += 2 * T::record_bytes) {
      add_record<ROWS, T>(rec, x, m, b, blocks, acc[0]);
      add_record<ROWS, T>(rec + T::record_bytes, x, m, b + 1, blocks, acc[1]);
    }
    if (b < blocks) add_record<ROWS, T>(rec, x, m, b, blocks, acc[0]);
  } else {
    // One row: a record at a time (with the shuffled input, pairs measured 0.97x: more spills).
    for (int64_t b = 0; b < blocks; ++b, rec += T::record_bytes) add_record<ROWS, T>(rec, x, m, b, blocks, acc[b & 1]);
  }
#endif
  for (int i = 0; i < ROWS; ++i) {
    const __m256 both = _mm256_add_ps(acc[0][i], acc[1][i]);
    _mm_storeu_ps(out[i], _mm_add_ps(_mm256_castps256_ps128(both), _mm256_extractf128_ps(both, 1)));
  }
#else
  for (int i = 0; i < ROWS; ++i)
    for (int r = 0; r < TILE_N; ++r) {
      float total = 0.f, offsets = 0.f;
      for (int64_t b = 0; b < blocks; ++b) {
        const uint8_t* rec = w.record(t, b);
        const int16_t* xb = x.q.data() + (m + i) * K + b * BLOCK;
        int32_t dot = 0;
        for (int64_t j = 0; j < BLOCK; ++j) dot += T::value(rec, r, j) * xb[j];
        total = std::fma(static_cast<float>(dot), T::scale(rec, r) * x.d[(m + i) * blocks + b], total);
        if constexpr (T::has_offset) offsets = std::fma(T::offset(rec, r), x.block_sum[(m + i) * blocks + b], offsets);
      }
      out[i][r] = total + offsets;
    }
#endif
  const int64_t n0 = t * TILE_N;
  const int64_t cols = std::min<int64_t>(TILE_N, N - n0);
  for (int i = 0; i < ROWS; ++i) std::copy_n(out[i], cols, y + (m + i) * N + n0);
}

// y[M, N] (row-major, preallocated) for x[M, K] against w's records. Rows go ROW_BLOCK at a time,
// then the remainder: every row block computes each output the same way, so a row's output does
// not depend on the other rows of the call.
constexpr int ROW_BLOCK = 4;
// A thread's tiles go in chunks of at most TILE_CHUNK, and a chunk's tiles row block by row block:
// every tile for rows 0-3, then every tile for rows 4-7, and so on. A row block's repeated input
// (1 KiB per 32-value block: 18 KiB at K = 576) then stays in L1 while the chunk's records (80
// bytes per block) pass through it, where tile by tile the whole batch's input (147 KiB at 32
// rows) streamed from L2 for each tile and bound the kernel at 16-32 rows. Measured on the
// embedded model's int4 layers, one thread: 32 rows 1.12-1.17x, 16 rows 1.06-1.17x, chunks of 6
// to 48 tiles alike. Each output is computed as before (the same tile call), so the bits are too.
constexpr int64_t TILE_CHUNK = 16;
// From this many rows the chunks are handed to threads as they ask (chunk_queue.h), so a thread
// that another process preempts holds back one chunk, not half the call. Below it the kernel
// streams the records from memory, and a contiguous share per thread keeps each stream (and its
// prefetches) unbroken (the queue measured 0.5x at one row, two threads); a thread done with its
// share takes from the back of the other's (`for_each_chunk_stealing`).
constexpr int64_t QUEUE_FROM_ROWS = 2 * ROW_BLOCK + 1;

template <typename T>
void matmul(const float* x, int64_t M, const T& w, int64_t N, float* y) {
  const QuantizedRows xq = quantize_rows(x, M, w.blocks * BLOCK, M >= T::repeated_from_rows);
  const int64_t tiles = (N + TILE_N - 1) / TILE_N;
  const auto tiles_from = [&](int64_t begin, int64_t end) {
    for (int64_t chunk = begin; chunk < end; chunk += TILE_CHUNK) {
      const int64_t chunk_end = std::min(end, chunk + TILE_CHUNK);
      int64_t m = 0;
      for (; m + ROW_BLOCK <= M; m += ROW_BLOCK)
        for (int64_t t = chunk; t < chunk_end; ++t) tile<ROW_BLOCK>(w, xq, m, t, y, N);
      for (int64_t t = chunk; t < chunk_end; ++t) switch (M - m) {
        case 3: tile<3>(w, xq, m, t, y, N); break;
        case 2: tile<2>(w, xq, m, t, y, N); break;
        case 1: tile<1>(w, xq, m, t, y, N); break;
        default: break;
      }
    }
  };
  // Claims of at most 1/16 of a thread's share, so the last one a thread takes is small; the
  // queue hands out at least 8 chunks per thread.
  const int64_t threads = at::get_num_threads();
  if (M < QUEUE_FROM_ROWS) {
    const int64_t claimed = std::max<int64_t>(1, std::min<int64_t>(TILE_CHUNK, tiles / (16 * threads)));
    return sgl_chunk_queue::for_each_chunk_stealing(tiles, claimed, tiles_from);
  }
  const int64_t queued = std::max<int64_t>(1, std::min<int64_t>(TILE_CHUNK, tiles / (8 * threads)));
  sgl_chunk_queue::for_each_chunk(tiles, queued, tiles_from);
}

}  // namespace sgl_int16_activations
