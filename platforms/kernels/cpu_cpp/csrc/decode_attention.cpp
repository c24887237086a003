// Decode attention over the paged KV pool, read in place (no gather into a padded block).
//
// For decode row b (one query token) and query head h, attends over the row's cached tokens
// slots[starts[b] .. starts[b+1]) of the pool kv[2, S, Hk, D] (K then V), with query heads
// grouped onto KV heads (h / (H / Hk)). One task per (row, KV head): each cached token's K and V
// are read by every query head of the group while in L1 (softmax in float32), so the pool is
// streamed once per step instead of being copied, padded and read again.
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
#include "ops.h"
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/record_function.h>
#include <torch/library.h>
#include <cmath>
#include <vector>
#include "vector_math.h"

namespace {

constexpr int64_t PREFETCH = 8;  // tokens ahead: slots are scattered over the pool
constexpr int64_t LANES = 8;

inline float dot(const float* a, const float* b, int64_t d) {
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < d; ++i) s += a[i] * b[i];
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

// scores[j] = exp(scores[j] - max) for j < len; returns their sum plus exp(sink - max), where
// max also covers the sink (-inf: no sink).
float softmax_numerators(float* scores, int64_t len, float sink = -INFINITY) {
  float mx = sink, total = 0.f;
  for (int64_t j = 0; j < len; ++j) mx = std::max(mx, scores[j]);
  if (sink > -INFINITY) total = std::exp(sink - mx);
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

// out[i] = sum_j p[j] * (V row of token j)[i] / denominator, for i < D.
void weighted_values(const float* p, const float* v, const int64_t* slots, int64_t len, int64_t stride, int64_t D,
                     float denominator, float* out) {
  const float inv = 1.f / denominator;
  int64_t i0 = 0;
#ifdef SGL_AVX2
  // Eight accumulators (64 columns) stay in registers across the tokens.
  for (; i0 + LANES * LANES <= D; i0 += LANES * LANES) {
    __m256 acc[LANES];
    for (int64_t c = 0; c < LANES; ++c) acc[c] = _mm256_setzero_ps();
    for (int64_t j = 0; j < len; ++j) {
      if (j + PREFETCH < len) _mm_prefetch(reinterpret_cast<const char*>(v + slots[j + PREFETCH] * stride + i0), _MM_HINT_T0);
      const float* row = v + slots[j] * stride + i0;
      const __m256 pj = _mm256_broadcast_ss(p + j);
      for (int64_t c = 0; c < LANES; ++c) acc[c] = _mm256_fmadd_ps(pj, _mm256_loadu_ps(row + c * LANES), acc[c]);
    }
    for (int64_t c = 0; c < LANES; ++c) _mm256_storeu_ps(out + i0 + c * LANES, _mm256_mul_ps(acc[c], _mm256_set1_ps(inv)));
  }
#endif
  if (i0 == D) return;
  std::vector<float> acc(D - i0, 0.f);
  for (int64_t j = 0; j < len; ++j) {
    const float* row = v + slots[j] * stride + i0;
    const float pj = p[j];
#pragma omp simd
    for (int64_t i = 0; i < D - i0; ++i) acc[i] += pj * row[i];
  }
  for (int64_t i = 0; i < D - i0; ++i) out[i0 + i] = acc[i] * inv;
}

}  // namespace

namespace sgl_cpu_cpp {

at::Tensor decode_attention(const at::Tensor& q, const at::Tensor& kv, const at::Tensor& slots,
                            const at::Tensor& starts, double scale, int64_t window, double softcap,
                            const std::optional<at::Tensor>& sinks) {
  RECORD_FUNCTION("sglang_cpu_cpp::decode_attention", std::vector<c10::IValue>());
  TORCH_CHECK(q.scalar_type() == at::kFloat && kv.scalar_type() == at::kFloat, "decode_attention: float32");
  TORCH_CHECK(q.dim() == 3 && kv.dim() == 4 && kv.size(0) == 2, "decode_attention: q [B, H, D], kv [2, S, Hk, D]");
  TORCH_CHECK(kv.is_contiguous() && slots.scalar_type() == at::kLong && starts.scalar_type() == at::kLong,
              "decode_attention: layout");
  const at::Tensor qc = q.contiguous();
  const int64_t B = q.size(0), H = q.size(1), D = q.size(2), S = kv.size(1), Hk = kv.size(2);
  TORCH_CHECK(H % Hk == 0 && kv.size(3) == D && starts.numel() == B + 1, "decode_attention: shapes");
  const int64_t group = H / Hk, stride = Hk * D;
  at::Tensor out = at::empty_like(qc);
  const float* qp = qc.data_ptr<float>();
  const float* kp = kv.data_ptr<float>();
  const float* vp = kp + S * stride;
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
  at::parallel_for(0, B * Hk, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / Hk, hk = task % Hk;
      const int64_t row_len = st[b + 1] - st[b];
      const int64_t len = window > 0 ? std::min(row_len, window) : row_len;  // the row's last `len` tokens
      const int64_t first = st[b + 1] - len;
      scores.resize(group * len);
      for (int64_t g = 0; g < group; ++g) {
        const int64_t h = hk * group + g;
        float* s = scores.data() + g * len;
        scores_of(qp + (b * H + h) * D, kp + hk * D, sp + first, len, stride, D, sc, s);
        if (cap > 0.f) soft_cap(s, len, cap);
        const float denominator = softmax_numerators(s, len, sink_logits ? sink_logits[h] : -INFINITY);
        weighted_values(s, vp + hk * D, sp + first, len, stride, D, denominator, op + (b * H + h) * D);
      }
    }
  });
  return out;
}

// Writes k, v [B, Hk, D] into the pool at new_slots, then attends as decode_attention.
at::Tensor decode_attention_store(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  at::Tensor kv, const at::Tensor& new_slots, const at::Tensor& slots,
                                  const at::Tensor& starts, double scale, int64_t window, double softcap,
                                  const std::optional<at::Tensor>& sinks) {
  RECORD_FUNCTION("sglang_cpu_cpp::decode_attention_store", std::vector<c10::IValue>());
  TORCH_CHECK(kv.scalar_type() == at::kFloat && k.scalar_type() == kv.scalar_type() && v.scalar_type() == kv.scalar_type(),
              "decode_attention: float32");
  TORCH_CHECK(new_slots.numel() == k.size(0) && k.sizes() == v.sizes(), "decode_attention: new rows");
  const int64_t rows = k.size(0), row = kv.size(2) * kv.size(3);
  TORCH_CHECK(k.numel() == rows * row && kv.is_contiguous(), "decode_attention: new rows' shape");
  const at::Tensor kc = k.contiguous(), vc = v.contiguous(), ns = new_slots.contiguous();
  const int64_t* dst = ns.data_ptr<int64_t>();
  float* pool = kv.data_ptr<float>();
  const int64_t S = kv.size(1);
  for (int64_t r = 0; r < rows; ++r) {
    TORCH_CHECK(dst[r] >= 0 && dst[r] < S, "decode_attention: slot out of range");
    std::copy_n(kc.data_ptr<float>() + r * row, row, pool + dst[r] * row);
    std::copy_n(vc.data_ptr<float>() + r * row, row, pool + (S + dst[r]) * row);
  }
  return decode_attention(q, kv, slots, starts, scale, window, softcap, sinks);
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
