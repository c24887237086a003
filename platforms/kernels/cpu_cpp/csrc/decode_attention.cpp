// Decode attention over the paged KV pool, read in place (no gather into a padded block).
//
// For decode row b (one query token) and query head h, attends over the row's cached tokens
// slots[starts[b] .. starts[b+1]) of the pool kv[2, S, Hk, D] (K then V), with query heads
// grouped onto KV heads (h / (H / Hk)). A task is one KV head over one chunk of a row's tokens
// (flash-decoding's split): its group of query heads take turns over each block of tokens, so the
// pool is streamed once per step, not once per query head; then each head's chunks are merged.
// Why chunks: one task per (row, KV head) gave a one-row step 3 tasks for 2 threads (the
// embedded model has 3 KV heads), so one thread did two thirds of the work.
//
// Per layer, optionally: a sliding window (a decode query sees only its row's last `window`
// tokens, so only those are read), logit soft-capping (`cap * tanh(score / cap)`), and attention
// sinks (gpt-oss: a learned logit per query head that joins the softmax's denominator with no
// value). `window <= 0`, `softcap <= 0` and no `sinks` switch each off.
//
// `mla_decode` is multi-head latent attention's decode in the absorbed form, over the latent pool.
//
// `decode_attention_store` first writes the step's new K/V rows into the pool (what the caller's
// index_copy did, one op call fewer per layer): decode steps are dominated by call overheads.
//
// The K/V pool is float32 or bfloat16 (`--kv-cache-dtype bf16`); queries, scores and sums are
// float32 either way. A bfloat16 value is a float32's high 16 bits, so a row widens exactly as it
// is loaded; stores round to nearest even, as torch's `to` does.
#include "ops.h"
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/record_function.h>
#include <c10/util/BFloat16.h>
#include <torch/library.h>
#include <cmath>
#include <type_traits>
#include <vector>
#include "vector_math.h"

namespace {

constexpr int64_t PREFETCH = 8;  // tokens ahead: slots are scattered over the pool
constexpr int64_t LANES = 8;

template <typename KV>
inline float dot(const float* a, const KV* b, int64_t d) {
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < d; ++i) s += a[i] * static_cast<float>(b[i]);
  return s;
}

#ifdef SGL_AVX2
// [sum(v[0]), ..., sum(v[7])]: the eight horizontal sums in one vector.
inline __m256 hsum8(const __m256 v[LANES]) {
  const __m256 a = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
  const __m256 b = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
}
#endif

// scores[j] = scale * dot(q, K row of token j) for j < len.
void scores_of(const float* q, const float* k, const int64_t* slots, int64_t len, int64_t stride, int64_t D,
               float scale, float* scores) {
  int64_t j = 0;
#ifdef SGL_AVX2
  if (D % LANES == 0) {
    for (; j + LANES <= len; j += LANES) {
      __m256 acc[LANES];
      const float* rows[LANES];
      for (int64_t t = 0; t < LANES; ++t) {
        acc[t] = _mm256_setzero_ps();
        rows[t] = k + slots[j + t] * stride;
        if (j + t + PREFETCH < len) _mm_prefetch(reinterpret_cast<const char*>(k + slots[j + t + PREFETCH] * stride), _MM_HINT_T0);
      }
      for (int64_t i = 0; i < D; i += LANES) {
        const __m256 qi = _mm256_loadu_ps(q + i);
        for (int64_t t = 0; t < LANES; ++t) acc[t] = _mm256_fmadd_ps(qi, _mm256_loadu_ps(rows[t] + i), acc[t]);
      }
      _mm256_storeu_ps(scores + j, _mm256_mul_ps(hsum8(acc), _mm256_set1_ps(scale)));
    }
  }
#endif
  for (; j < len; ++j) scores[j] = dot(q, k + slots[j] * stride, D) * scale;
}

// scores[j] = cap * tanh(scores[j] / cap) for j < len.
void soft_cap(float* scores, int64_t len, float cap) {
  for (int64_t j = 0; j < len; ++j) scores[j] = cap * std::tanh(scores[j] / cap);
}

// scores[j] = exp(scores[j] - max) for j < len; returns their sum, and the max in `max_out`.
float softmax_numerators(float* scores, int64_t len, float* max_out = nullptr) {
  float mx = -INFINITY, total = 0.f;
  for (int64_t j = 0; j < len; ++j) mx = std::max(mx, scores[j]);
  if (max_out != nullptr) *max_out = mx;
  int64_t j = 0;
#ifdef SGL_AVX2
  __m256 sum = _mm256_setzero_ps();
  for (; j + LANES <= len; j += LANES) {
    const __m256 e = sgl_cpu_cpp::exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(scores + j), _mm256_set1_ps(mx)));
    _mm256_storeu_ps(scores + j, e);
    sum = _mm256_add_ps(sum, e);
  }
  alignas(32) float lanes[LANES];
  _mm256_store_ps(lanes, sum);
  for (const float v : lanes) total += v;
#endif
  for (; j < len; ++j) {
    scores[j] = std::exp(scores[j] - mx);
    total += scores[j];
  }
  return total;
}

// acc[i] += sum_j p[j] * (V row of token j)[i] for i < D, the tokens in order.
void accumulate_values(const float* p, const float* v, const int64_t* slots, int64_t len, int64_t stride, int64_t D,
                       float* acc) {
  int64_t i0 = 0;
#ifdef SGL_AVX2
  // Eight accumulators (64 columns) stay in registers across the tokens.
  for (; i0 + LANES * LANES <= D; i0 += LANES * LANES) {
    __m256 sums[LANES];
    for (int64_t c = 0; c < LANES; ++c) sums[c] = _mm256_loadu_ps(acc + i0 + c * LANES);
    for (int64_t j = 0; j < len; ++j) {
      if (j + PREFETCH < len) _mm_prefetch(reinterpret_cast<const char*>(v + slots[j + PREFETCH] * stride + i0), _MM_HINT_T0);
      const float* row = v + slots[j] * stride + i0;
      const __m256 pj = _mm256_broadcast_ss(p + j);
      for (int64_t c = 0; c < LANES; ++c) sums[c] = _mm256_fmadd_ps(pj, _mm256_loadu_ps(row + c * LANES), sums[c]);
    }
    for (int64_t c = 0; c < LANES; ++c) _mm256_storeu_ps(acc + i0 + c * LANES, sums[c]);
  }
#endif
  for (int64_t j = 0; j < len; ++j) {
    const float* row = v + slots[j] * stride + i0;
    const float pj = p[j];
#pragma omp simd
    for (int64_t i = i0; i < D; ++i) acc[i] += pj * row[i - i0];
  }
}

// out[i] = sum_j p[j] * (V row of token j)[i] / denominator, for i < D.
void weighted_values(const float* p, const float* v, const int64_t* slots, int64_t len, int64_t stride, int64_t D,
                     float denominator, float* out) {
  std::fill_n(out, D, 0.f);
  accumulate_values(p, v, slots, len, stride, D, out);
  const float inv = 1.f / denominator;
  for (int64_t i = 0; i < D; ++i) out[i] *= inv;
}

// Tokens a task attends: a row's context is cut into chunks of this many (the last shorter), each
// a task per KV head, then the chunks' partial softmaxes are merged. A fixed length, so a row's
// output depends on its own context only, not on the batch or the thread count; a row of at most
// one chunk is attended in one piece, with no merge. 64, not 128: a one-row step of 65-128 tokens
// (a short chat's) then has 6 tasks for 2 threads, not 3.
constexpr int64_t CHUNK = 64;
// Within a task, the group's query heads go over blocks of this many tokens in turn, so each
// block's K and V rows are read from memory once for the whole group.
constexpr int64_t TOKEN_BLOCK = 32;
// A bfloat16 pool's query heads share one pass over a block's rows: each K or V vector widened
// once feeds HEAD_SET heads' multiply-adds from registers (three heads by four tokens, or by four
// column vectors: twelve accumulators, with three query or weight vectors and the row's vector the
// sixteen AVX2 registers). Widened in each head's own pass, every row was converted once per head,
// and a step read from a bfloat16 pool slower than from a float32 one. Float32 rows keep one pass
// per head, eight tokens' rows loaded at a time: at scattered slots the loads in flight bound the
// kernel, and head sets (four tokens at a time) measured 0.7-0.9x there.
constexpr int HEAD_SET = 3;
constexpr int SET_TOKENS = 4;
constexpr int SET_VECTORS = 4;

#ifdef SGL_AVX2
// Eight pool values as float32 lanes: a bfloat16 value is a float32's high 16 bits.
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const c10::BFloat16* p) {
  const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
}
#endif

#ifdef SGL_AVX2
// Every cache line of a row of D values: at long contexts the rows come from memory, a head's
// slice of each token's row apart from the next one's, where the hardware's prefetchers follow.
template <typename KV>
inline void prefetch_row(const KV* row, int64_t D) {
  for (int64_t byte = 0; byte < D * static_cast<int64_t>(sizeof(KV)); byte += 64)
    _mm_prefetch(reinterpret_cast<const char*>(row) + byte, _MM_HINT_T0);
}
#endif

// scores[h * len + j] = scale * dot(q + h * D, K row of token j) for HEADS heads and j < n; rows
// are prefetched PREFETCH tokens ahead, up to `ahead` (slots readable past the block's n).
template <int HEADS, typename KV>
void head_set_scores(const float* q, const KV* k, const int64_t* slots, int64_t n, int64_t ahead, int64_t stride,
                     int64_t D, float scale, float* scores, int64_t len) {
  int64_t j = 0;
#ifdef SGL_AVX2
  if (D % LANES == 0) {
    for (; j + SET_TOKENS <= n; j += SET_TOKENS) {
      const KV* rows[SET_TOKENS];
      for (int t = 0; t < SET_TOKENS; ++t) {
        rows[t] = k + slots[j + t] * stride;
        if (j + t + PREFETCH < ahead) prefetch_row(k + slots[j + t + PREFETCH] * stride, D);
      }
      __m256 acc[2 * LANES];  // token t, head h at t * HEADS + h; the rest zero for the sums
      for (auto& a : acc) a = _mm256_setzero_ps();
      for (int64_t i = 0; i < D; i += LANES) {
        __m256 qi[HEADS];
        for (int h = 0; h < HEADS; ++h) qi[h] = _mm256_loadu_ps(q + h * D + i);
        for (int t = 0; t < SET_TOKENS; ++t) {
          const __m256 kt = load8(rows[t] + i);
          for (int h = 0; h < HEADS; ++h) acc[t * HEADS + h] = _mm256_fmadd_ps(qi[h], kt, acc[t * HEADS + h]);
        }
      }
      alignas(32) float sums[2 * LANES];
      _mm256_store_ps(sums, _mm256_mul_ps(hsum8(acc), _mm256_set1_ps(scale)));
      if (SET_TOKENS * HEADS > LANES) _mm256_store_ps(sums + LANES, _mm256_mul_ps(hsum8(acc + LANES), _mm256_set1_ps(scale)));
      for (int t = 0; t < SET_TOKENS; ++t)
        for (int h = 0; h < HEADS; ++h) scores[h * len + j + t] = sums[t * HEADS + h];
    }
  }
#endif
  for (; j < n; ++j)
    for (int h = 0; h < HEADS; ++h) scores[h * len + j] = dot(q + h * D, k + slots[j] * stride, D) * scale;
}

// acc[h * (D + 2) + i] += sum_j p[h * len + j] * (V row of token j)[i] for HEADS heads, i < D, the
// tokens in order (so each output sums as accumulate_values does); prefetched as head_set_scores.
template <int HEADS, typename KV>
void head_set_values(const float* p, int64_t len, const KV* v, const int64_t* slots, int64_t n, int64_t ahead,
                     int64_t stride, int64_t D, float* acc) {
  int64_t i0 = 0;
#ifdef SGL_AVX2
  const auto columns = [&](auto vectors) {  // the next `vectors` 8-column groups of every head
    constexpr int VECTORS = decltype(vectors)::value;
    __m256 sums[HEADS][VECTORS];
    for (int h = 0; h < HEADS; ++h)
      for (int c = 0; c < VECTORS; ++c) sums[h][c] = _mm256_loadu_ps(acc + h * (D + 2) + i0 + c * LANES);
    for (int64_t j = 0; j < n; ++j) {
      if (i0 == 0 && j + PREFETCH < ahead) prefetch_row(v + slots[j + PREFETCH] * stride, D);
      const KV* row = v + slots[j] * stride + i0;
      __m256 pj[HEADS];
      for (int h = 0; h < HEADS; ++h) pj[h] = _mm256_broadcast_ss(p + h * len + j);
      for (int c = 0; c < VECTORS; ++c) {
        const __m256 x = load8(row + c * LANES);
        for (int h = 0; h < HEADS; ++h) sums[h][c] = _mm256_fmadd_ps(pj[h], x, sums[h][c]);
      }
    }
    for (int h = 0; h < HEADS; ++h)
      for (int c = 0; c < VECTORS; ++c) _mm256_storeu_ps(acc + h * (D + 2) + i0 + c * LANES, sums[h][c]);
    i0 += VECTORS * LANES;
  };
  while (i0 + SET_VECTORS * LANES <= D) columns(std::integral_constant<int, SET_VECTORS>{});
  while (i0 + LANES <= D) columns(std::integral_constant<int, 1>{});
#endif
  for (int h = 0; h < HEADS; ++h)
    for (int64_t j = 0; j < n; ++j) {
      const KV* row = v + slots[j] * stride;
      const float pj = p[h * len + j];
      for (int64_t i = i0; i < D; ++i) acc[h * (D + 2) + i] += pj * static_cast<float>(row[i]);
    }
}

// The group's heads in sets of HEAD_SET (the last set smaller): `set(heads, first head)`.
template <typename Set>
void by_head_sets(int64_t group, Set set) {
  int64_t h0 = 0;
  for (; h0 + HEAD_SET <= group; h0 += HEAD_SET) set(std::integral_constant<int, HEAD_SET>{}, h0);
  if (group - h0 == 2) set(std::integral_constant<int, 2>{}, h0);
  if (group - h0 == 1) set(std::integral_constant<int, 1>{}, h0);
}

// One task: the `group` query heads from q (rows of D) attend over tokens slots[0..len) of one KV
// head. `part` receives, per head, D unnormalized value sums, then the scores' maximum and the sum
// of their exponentials (the sink left out; `merge` adds it).
template <typename KV>
void attend_chunk(const float* q, const KV* k, const KV* v, const int64_t* slots, int64_t len, int64_t stride,
                  int64_t D, int64_t group, float scale, float cap, std::vector<float>& scores, float* part) {
  constexpr bool in_place = std::is_same_v<KV, float>;  // else head sets (see HEAD_SET)
  scores.resize(group * len);
  for (int64_t j0 = 0; j0 < len; j0 += TOKEN_BLOCK) {
    const int64_t n = std::min(TOKEN_BLOCK, len - j0);
    if constexpr (in_place) {
      for (int64_t g = 0; g < group; ++g) scores_of(q + g * D, k, slots + j0, n, stride, D, scale, scores.data() + g * len + j0);
    } else {
      by_head_sets(group, [&](auto heads, int64_t h0) {
        head_set_scores<decltype(heads)::value>(q + h0 * D, k, slots + j0, n, len - j0, stride, D, scale,
                                                 scores.data() + h0 * len + j0, len);
      });
    }
  }
  for (int64_t g = 0; g < group; ++g) {
    float* s = scores.data() + g * len;
    if (cap > 0.f) soft_cap(s, len, cap);
    float* head = part + g * (D + 2);
    head[D + 1] = softmax_numerators(s, len, head + D);
    std::fill_n(head, D, 0.f);
  }
  for (int64_t j0 = 0; j0 < len; j0 += TOKEN_BLOCK) {
    const int64_t n = std::min(TOKEN_BLOCK, len - j0);
    if constexpr (in_place) {
      for (int64_t g = 0; g < group; ++g)
        accumulate_values(scores.data() + g * len + j0, v, slots + j0, n, stride, D, part + g * (D + 2));
    } else {
      by_head_sets(group, [&](auto heads, int64_t h0) {
        head_set_values<decltype(heads)::value>(scores.data() + h0 * len + j0, len, v, slots + j0, n, len - j0,
                                                 stride, D, part + h0 * (D + 2));
      });
    }
  }
}

// out[i] = the softmax-weighted value of one query head from its chunks' partials (`parts`
// apart by `part_stride`), the sink joining the denominator.
void merge(const float* parts, int64_t chunks, int64_t part_stride, int64_t D, float sink, float* out) {
  float mx = sink;
  for (int64_t c = 0; c < chunks; ++c) mx = std::max(mx, parts[c * part_stride + D]);
  float total = sink > -INFINITY ? std::exp(sink - mx) : 0.f;
  std::fill_n(out, D, 0.f);
  for (int64_t c = 0; c < chunks; ++c) {
    const float* part = parts + c * part_stride;
    const float weight = std::exp(part[D] - mx);
    total += part[D + 1] * weight;
    for (int64_t i = 0; i < D; ++i) out[i] += part[i] * weight;
  }
  const float inv = 1.f / total;
  for (int64_t i = 0; i < D; ++i) out[i] *= inv;
}

}  // namespace

namespace sgl_cpu_cpp {

at::Tensor decode_attention(const at::Tensor& q, const at::Tensor& kv, const at::Tensor& slots,
                            const at::Tensor& starts, double scale, int64_t window, double softcap,
                            const std::optional<at::Tensor>& sinks) {
  at::Tensor out = at::empty(q.sizes(), q.options());
  decode_attention_into(q, kv, slots, starts, scale, window, softcap, sinks, out);
  return out;
}

void decode_attention_into(const at::Tensor& q, const at::Tensor& kv, const at::Tensor& slots,
                           const at::Tensor& starts, double scale, int64_t window, double softcap,
                           const std::optional<at::Tensor>& sinks, at::Tensor& out) {
  RECORD_FUNCTION("sglang_cpu_cpp::decode_attention", std::vector<c10::IValue>());
  TORCH_CHECK(q.scalar_type() == at::kFloat && (kv.scalar_type() == at::kFloat || kv.scalar_type() == at::kBFloat16),
              "decode_attention: float32 queries, a float32 or bfloat16 pool");
  TORCH_CHECK(q.dim() == 3 && kv.dim() == 4 && kv.size(0) == 2, "decode_attention: q [B, H, D], kv [2, S, Hk, D]");
  TORCH_CHECK(kv.is_contiguous() && slots.scalar_type() == at::kLong && starts.scalar_type() == at::kLong,
              "decode_attention: layout");
  const at::Tensor qc = q.contiguous();
  const int64_t B = q.size(0), H = q.size(1), D = q.size(2), S = kv.size(1), Hk = kv.size(2);
  TORCH_CHECK(H % Hk == 0 && kv.size(3) == D && starts.numel() == B + 1, "decode_attention: shapes");
  const int64_t group = H / Hk, stride = Hk * D;
  TORCH_CHECK(out.is_contiguous() && out.sizes() == q.sizes() && out.scalar_type() == at::kFloat,
              "decode_attention: output");
  const float* qp = qc.data_ptr<float>();
  const at::Tensor slots_c = slots.contiguous(), starts_c = starts.contiguous();
  const int64_t* sp = slots_c.data_ptr<int64_t>();
  const int64_t* st = starts_c.data_ptr<int64_t>();
  float* op = out.data_ptr<float>();
  const float sc = static_cast<float>(scale), cap = static_cast<float>(softcap);
  at::Tensor sinks_c;
  if (sinks.has_value()) {
    sinks_c = sinks->to(at::kFloat).contiguous();
    TORCH_CHECK(sinks_c.numel() == H, "decode_attention: sinks [H]");
  }
  const float* sink_logits = sinks.has_value() ? sinks_c.data_ptr<float>() : nullptr;
  // Each row's attended range (its last `window` tokens with a window) and its chunks, numbered
  // across the batch: chunk c of row b is number chunk_at[b] + c.
  std::vector<int64_t> first(B), len(B), chunk_at(B + 1, 0);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t row_len = st[b + 1] - st[b];
    len[b] = window > 0 ? std::min(row_len, window) : row_len;
    first[b] = st[b + 1] - len[b];
    chunk_at[b + 1] = chunk_at[b] + std::max<int64_t>(1, (len[b] + CHUNK - 1) / CHUNK);
  }
  const int64_t chunks = chunk_at[B], part_stride = H * (D + 2);
  std::vector<int64_t> row_of(chunks), split_rows;
  for (int64_t b = 0; b < B; ++b) {
    std::fill(row_of.begin() + chunk_at[b], row_of.begin() + chunk_at[b + 1], b);
    if (chunk_at[b + 1] - chunk_at[b] > 1) split_rows.push_back(b);
  }
  // The partials of split rows' chunks (a row of one chunk is finished by its own task).
  std::vector<float> parts(split_rows.empty() ? 0 : chunks * part_stride);
  const auto sink_of = [&](int64_t h) { return sink_logits ? sink_logits[h] : -INFINITY; };
  const auto attend = [&](const auto* kp) {  // the pool's K half; its V half follows
    const auto* vp = kp + S * stride;
    at::parallel_for(0, chunks * Hk, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> scores, own(group * (D + 2));
      for (int64_t task = begin; task < end; ++task) {
        const int64_t c = task / Hk, hk = task % Hk, b = row_of[c], h0 = hk * group;
        const bool whole = chunk_at[b + 1] - chunk_at[b] == 1;
        const int64_t from = (c - chunk_at[b]) * CHUNK, count = std::min(CHUNK, len[b] - from);
        float* part = whole ? own.data() : parts.data() + c * part_stride + h0 * (D + 2);
        attend_chunk(qp + (b * H + h0) * D, kp + hk * D, vp + hk * D, sp + first[b] + from,
                     std::max<int64_t>(count, 0), stride, D, group, sc, cap, scores, part);
        if (whole)
          for (int64_t g = 0; g < group; ++g)
            merge(part + g * (D + 2), 1, 0, D, sink_of(h0 + g), op + (b * H + h0 + g) * D);
      }
    });
  };
  if (kv.scalar_type() == at::kBFloat16)
    attend(kv.data_ptr<c10::BFloat16>());
  else
    attend(kv.data_ptr<float>());
  at::parallel_for(0, static_cast<int64_t>(split_rows.size()) * H, 16, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = split_rows[task / H], h = task % H;
      merge(parts.data() + chunk_at[b] * part_stride + h * (D + 2), chunk_at[b + 1] - chunk_at[b], part_stride, D,
            sink_of(h), op + (b * H + h) * D);
    }
  });
}

// Writes k, v [B, Hk, D] into the pool at new_slots, then attends as decode_attention.
at::Tensor decode_attention_store(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  at::Tensor kv, const at::Tensor& new_slots, const at::Tensor& slots,
                                  const at::Tensor& starts, double scale, int64_t window, double softcap,
                                  const std::optional<at::Tensor>& sinks) {
  at::Tensor out = at::empty(q.sizes(), q.options());
  decode_attention_store_into(q, k, v, kv, new_slots, slots, starts, scale, window, softcap, sinks, out);
  return out;
}

void decode_attention_store_into(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, at::Tensor& kv,
                                 const at::Tensor& new_slots, const at::Tensor& slots, const at::Tensor& starts,
                                 double scale, int64_t window, double softcap,
                                 const std::optional<at::Tensor>& sinks, at::Tensor& out) {
  RECORD_FUNCTION("sglang_cpu_cpp::decode_attention_store", std::vector<c10::IValue>());
  TORCH_CHECK(k.scalar_type() == at::kFloat && v.scalar_type() == at::kFloat, "decode_attention: float32 new rows");
  TORCH_CHECK(new_slots.numel() == k.size(0) && k.sizes() == v.sizes(), "decode_attention: new rows");
  const int64_t rows = k.size(0), row = kv.size(2) * kv.size(3);
  TORCH_CHECK(k.numel() == rows * row && kv.is_contiguous(), "decode_attention: new rows' shape");
  const at::Tensor kc = k.contiguous(), vc = v.contiguous(), ns = new_slots.contiguous();
  const int64_t* dst = ns.data_ptr<int64_t>();
  const int64_t S = kv.size(1);
  for (int64_t r = 0; r < rows; ++r) TORCH_CHECK(dst[r] >= 0 && dst[r] < S, "decode_attention: slot out of range");
  const auto store = [&](auto* pool) {  // copy_n converts: into bfloat16, rounding to nearest even
    for (int64_t r = 0; r < rows; ++r) {
      std::copy_n(kc.data_ptr<float>() + r * row, row, pool + dst[r] * row);
      std::copy_n(vc.data_ptr<float>() + r * row, row, pool + (S + dst[r]) * row);
    }
  };
  if (kv.scalar_type() == at::kBFloat16)
    store(kv.data_ptr<c10::BFloat16>());
  else
    store(kv.data_ptr<float>());
  decode_attention_into(q, kv, slots, starts, scale, window, softcap, sinks, out);
}

// Multi-head latent attention's absorbed decode over the latent pool kv[S, R + r]: for row b and
// head h, query[b, h] (already moved onto the latent and joined with its rotary part) attends
// over the row's cached [c | k_pe] rows; the values are each row's first R columns (the latent).
// Every head reads the same rows (one KV head), so a task is one row's heads in turn, the rows
// staying in cache between them.
at::Tensor mla_decode(const at::Tensor& query, const at::Tensor& kv, const at::Tensor& slots, const at::Tensor& starts,
                      int64_t rank, double scale) {
  RECORD_FUNCTION("sglang_cpu_cpp::mla_decode", std::vector<c10::IValue>());
  TORCH_CHECK(query.scalar_type() == at::kFloat && kv.scalar_type() == at::kFloat, "mla_decode: float32");
  TORCH_CHECK(query.dim() == 3 && kv.dim() == 2 && kv.size(1) == query.size(2) && rank <= kv.size(1),
              "mla_decode: query [B, H, R + r], kv [S, R + r]");
  TORCH_CHECK(kv.is_contiguous() && slots.scalar_type() == at::kLong && starts.scalar_type() == at::kLong,
              "mla_decode: layout");
  const at::Tensor qc = query.contiguous();
  const int64_t B = query.size(0), H = query.size(1), W = kv.size(1);
  TORCH_CHECK(starts.numel() == B + 1, "mla_decode: starts");
  at::Tensor out = at::empty({B, H, rank}, query.options());
  const float* qp = qc.data_ptr<float>();
  const float* kp = kv.data_ptr<float>();
  const at::Tensor slots_c = slots.contiguous(), starts_c = starts.contiguous();
  const int64_t* sp = slots_c.data_ptr<int64_t>();
  const int64_t* st = starts_c.data_ptr<int64_t>();
  float* op = out.data_ptr<float>();
  const float sc = static_cast<float>(scale);
  at::parallel_for(0, B * H, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / H;
      const int64_t first = st[b], len = st[b + 1] - st[b];
      scores.resize(len);
      scores_of(qp + task * W, kp, sp + first, len, W, W, sc, scores.data());
      const float denominator = softmax_numerators(scores.data(), len);
      weighted_values(scores.data(), kp, sp + first, len, W, rank, denominator, op + task * rank);
    }
  });
  return out;
}

}  // namespace sgl_cpu_cpp

TORCH_LIBRARY_FRAGMENT(sglang_cpu_cpp, m) {
  m.def("mla_decode(Tensor query, Tensor kv, Tensor slots, Tensor starts, int rank, float scale) -> Tensor");
  m.def(
      "decode_attention(Tensor q, Tensor kv, Tensor slots, Tensor starts, float scale, int window, float softcap, "
      "Tensor? sinks) -> Tensor");
  m.def(
      "decode_attention_store(Tensor q, Tensor k, Tensor v, Tensor(a!) kv, Tensor new_slots, Tensor slots, "
      "Tensor starts, float scale, int window, float softcap, Tensor? sinks) -> Tensor");
}

TORCH_LIBRARY_IMPL(sglang_cpu_cpp, CPU, m) {
  m.impl("decode_attention", &sgl_cpu_cpp::decode_attention);
  m.impl("decode_attention_store", &sgl_cpu_cpp::decode_attention_store);
  m.impl("mla_decode", &sgl_cpu_cpp::mla_decode);
}
