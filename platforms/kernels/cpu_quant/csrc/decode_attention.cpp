// Decode attention over the paged KV pool, read in place (no gather into a padded block).
//
// For decode row b (one query token) and query head h, attends over the row's cached tokens
// slots[starts[b] .. starts[b+1]) of the pool kv[2, S, Hk, D] (K then V), with query heads
// grouped onto KV heads (h / (H / Hk)). One pass per (row, KV head): each cached token's K and V
// are loaded once per pass and used by every query head of the group (softmax in float32), so the
// pool is streamed once per step instead of being copied, padded and read again.
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cmath>
#include <vector>

namespace {

constexpr int64_t PREFETCH = 8;

inline float dot(const float* a, const float* b, int64_t d) {
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < d; ++i) s += a[i] * b[i];
  return s;
}

torch::Tensor decode_attention(const torch::Tensor& q, const torch::Tensor& kv, const torch::Tensor& slots,
                               const torch::Tensor& starts, double scale) {
  TORCH_CHECK(q.scalar_type() == torch::kFloat32 && kv.scalar_type() == torch::kFloat32, "decode_attention: float32");
  TORCH_CHECK(q.dim() == 3 && kv.dim() == 4 && kv.size(0) == 2, "decode_attention: q [B, H, D], kv [2, S, Hk, D]");
  TORCH_CHECK(kv.is_contiguous() && slots.scalar_type() == torch::kLong && starts.scalar_type() == torch::kLong,
              "decode_attention: layout");
  const torch::Tensor qc = q.contiguous();
  const int64_t B = q.size(0), H = q.size(1), D = q.size(2), S = kv.size(1), Hk = kv.size(2);
  TORCH_CHECK(H % Hk == 0 && kv.size(3) == D && starts.numel() == B + 1, "decode_attention: shapes");
  const int64_t group = H / Hk;
  torch::Tensor out = torch::empty_like(qc);
  const float* qp = qc.data_ptr<float>();
  const float* kp = kv.data_ptr<float>();
  const float* vp = kp + S * Hk * D;
  const int64_t* sp = slots.contiguous().data_ptr<int64_t>();
  const int64_t* st = starts.contiguous().data_ptr<int64_t>();
  float* op = out.data_ptr<float>();
  const float sc = static_cast<float>(scale);
  at::parallel_for(0, B * Hk, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores, acc(D);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / Hk, hk = task % Hk;
      const int64_t first = st[b], len = st[b + 1] - st[b];
      scores.resize(group * len);
      const float* qrow = qp + (b * H + hk * group) * D;
      // Pass 1: every score of the group's heads (each K row loaded once, used by every head).
      for (int64_t j = 0; j < len; ++j) {
        // Slots are scattered over the pool: fetch a few rows ahead of use.
        if (j + PREFETCH < len) __builtin_prefetch(kp + (sp[first + j + PREFETCH] * Hk + hk) * D);
        const float* krow = kp + (sp[first + j] * Hk + hk) * D;
        for (int64_t g = 0; g < group; ++g) scores[g * len + j] = dot(qrow + g * D, krow, D) * sc;
      }
      for (int64_t g = 0; g < group; ++g) {
        // Pass 2: softmax weights; pass 3: the weighted sum of V rows.
        float* s = scores.data() + g * len;
        float mx = -INFINITY, den = 0.f;
        for (int64_t j = 0; j < len; ++j) mx = std::max(mx, s[j]);
        for (int64_t j = 0; j < len; ++j) {
          s[j] = std::exp(s[j] - mx);
          den += s[j];
        }
        std::fill(acc.begin(), acc.end(), 0.f);
        float* a = acc.data();
        for (int64_t j = 0; j < len; ++j) {
          if (j + PREFETCH < len) __builtin_prefetch(vp + (sp[first + j + PREFETCH] * Hk + hk) * D);
          const float* vrow = vp + (sp[first + j] * Hk + hk) * D;
          const float p = s[j];
#pragma omp simd
          for (int64_t i = 0; i < D; ++i) a[i] += p * vrow[i];
        }
        float* o = op + (b * H + hk * group + g) * D;
        const float inv = 1.f / den;
        for (int64_t i = 0; i < D; ++i) o[i] = a[i] * inv;
      }
    }
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(sglang_cpu_quant, m) {
  m.def("decode_attention(Tensor q, Tensor kv, Tensor slots, Tensor starts, float scale) -> Tensor");
}

TORCH_LIBRARY_IMPL(sglang_cpu_quant, CPU, m) { m.impl("decode_attention", &decode_attention); }
