// The small float32 ops around a decode step's matmuls: RMSNorm (plain and fused with the
// residual add), rotary embedding and SiLU-and-multiply.
//
// Why C++: at decode each of these touches a few hundred values, and through torch they are a
// chain of 5-10 dispatched ops each (pow, mean, rsqrt, mul, cat...), about 100 us per norm on
// this class of machine: together more than the attention of a step. Here each is one loop.
// Rows are split over threads only when there are enough of them to pay for waking threads
// (a decode row runs inline). Arithmetic is float32 throughout, in the references' order of
// operations (mean of squares, then rsqrt, then scale), so results match them to rounding.
#include "ops.h"
#include "vector_math.h"
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/record_function.h>
#include <torch/library.h>
#include <cmath>

namespace {

constexpr int64_t ROWS_PER_TASK = 16;

// Views (a head-wise slice of a fused projection) are copied once into rows.
at::Tensor float_rows(const at::Tensor& x, const char* op) {
  TORCH_CHECK(x.scalar_type() == at::kFloat, op, ": float32 only");
  return x.contiguous();
}

// An output the caller gave: float32 rows of the input's size.
void check_output(const at::Tensor& out, const at::Tensor& like, const char* op) {
  TORCH_CHECK(out.is_contiguous() && out.numel() == like.numel() && out.scalar_type() == at::kFloat, op, ": output");
}

inline void normalize_row(const float* x, const float* w, float eps, int64_t H, float* out) {
  float squares = 0.f;
#pragma omp simd reduction(+ : squares)
  for (int64_t i = 0; i < H; ++i) squares += x[i] * x[i];
  const float inv = 1.f / std::sqrt(squares / static_cast<float>(H) + eps);
#pragma omp simd
  for (int64_t i = 0; i < H; ++i) out[i] = w[i] * (x[i] * inv);
}

// Rotates every head of one token: NeoX pairs (i, i + R/2), GPT-J pairs (2i, 2i + 1), over the
// first R = 2 * half dimensions; the rest pass through.
void rotate_heads(const float* in, int64_t heads, int64_t D, const float* cos, const float* sin, int64_t half,
                  bool neox, float* out) {
  for (int64_t h = 0; h < heads; ++h) {
    const float* x = in + h * D;
    float* y = out + h * D;
    for (int64_t i = 0; i < half; ++i) {
      const int64_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
      y[a] = x[a] * cos[i] - x[b] * sin[i];
      y[b] = x[b] * cos[i] + x[a] * sin[i];
    }
    for (int64_t i = 2 * half; i < D; ++i) y[i] = x[i];
  }
}

}  // namespace

namespace sgl_cpu_cpp {

at::Tensor rms_norm(const at::Tensor& input, const at::Tensor& weight, double eps) {
  at::Tensor out = at::empty(input.sizes(), input.options());
  rms_norm_into(input, weight, eps, out);
  return out;
}

void rms_norm_into(const at::Tensor& input, const at::Tensor& weight, double eps, at::Tensor& out) {
  RECORD_FUNCTION("sglang_cpu_cpp::rms_norm", std::vector<c10::IValue>());
  const at::Tensor x = float_rows(input, "rms_norm");
  const int64_t H = x.size(-1), rows = x.numel() / H;
  check_output(out, x, "rms_norm");
  const float *xp = x.data_ptr<float>(), *wp = weight.contiguous().data_ptr<float>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, rows, ROWS_PER_TASK, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) normalize_row(xp + r * H, wp, static_cast<float>(eps), H, op + r * H);
  });
}

std::tuple<at::Tensor, at::Tensor> fused_add_rms_norm(const at::Tensor& input, const at::Tensor& res,
                                                      const at::Tensor& weight, double eps) {
  at::Tensor out = at::empty(input.sizes(), input.options()), summed = at::empty(input.sizes(), input.options());
  fused_add_rms_norm_into(input, res, weight, eps, out, summed);
  return {out, summed};
}

void fused_add_rms_norm_into(const at::Tensor& input, const at::Tensor& res, const at::Tensor& weight, double eps,
                             at::Tensor& out, at::Tensor& summed) {
  RECORD_FUNCTION("sglang_cpu_cpp::fused_add_rms_norm", std::vector<c10::IValue>());
  const at::Tensor x = float_rows(input, "fused_add_rms_norm"), residual = float_rows(res, "fused_add_rms_norm");
  const int64_t H = x.size(-1), rows = x.numel() / H;
  check_output(out, x, "fused_add_rms_norm");
  check_output(summed, x, "fused_add_rms_norm");
  const float *xp = x.data_ptr<float>(), *rp = residual.data_ptr<float>(), *wp = weight.contiguous().data_ptr<float>();
  float *sp = summed.data_ptr<float>(), *op = out.data_ptr<float>();
  at::parallel_for(0, rows, ROWS_PER_TASK, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
#pragma omp simd
      for (int64_t i = 0; i < H; ++i) sp[r * H + i] = xp[r * H + i] + rp[r * H + i];
      normalize_row(sp + r * H, wp, static_cast<float>(eps), H, op + r * H);
    }
  });
}

std::tuple<at::Tensor, at::Tensor> apply_rotary(const at::Tensor& positions, const at::Tensor& q,
                                                const at::Tensor& k, const at::Tensor& cos_sin,
                                                bool is_neox) {
  at::Tensor q_out = at::empty(q.sizes(), q.options()), k_out = at::empty(k.sizes(), k.options());
  apply_rotary_into(positions, q, k, cos_sin, is_neox, q_out, k_out);
  return {q_out, k_out};
}

void apply_rotary_into(const at::Tensor& positions, const at::Tensor& q, const at::Tensor& k,
                       const at::Tensor& cos_sin, bool is_neox, at::Tensor& q_out, at::Tensor& k_out) {
  RECORD_FUNCTION("sglang_cpu_cpp::apply_rotary", std::vector<c10::IValue>());
  const at::Tensor qc = float_rows(q, "apply_rotary"), kc = float_rows(k, "apply_rotary");
  const at::Tensor table = float_rows(cos_sin, "apply_rotary");
  TORCH_CHECK(q.dim() == 3 && k.dim() == 3, "apply_rotary: q [T, Hq, D], k [T, Hk, D]");
  const int64_t T = q.size(0), Hq = q.size(1), Hk = k.size(1), D = q.size(2), half = table.size(1) / 2;
  TORCH_CHECK(2 * half <= D && k.size(2) == D, "apply_rotary: rotary dim exceeds the head dim");
  const at::Tensor pos = positions.to(at::kLong).contiguous();
  check_output(q_out, qc, "apply_rotary");
  check_output(k_out, kc, "apply_rotary");
  const int64_t* pp = pos.data_ptr<int64_t>();
  const float *qp = qc.data_ptr<float>(), *kp = kc.data_ptr<float>(), *tp = table.data_ptr<float>();
  float *qo = q_out.data_ptr<float>(), *ko = k_out.data_ptr<float>();
  at::parallel_for(0, T, ROWS_PER_TASK, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float* cos = tp + pp[t] * 2 * half;
      rotate_heads(qp + t * Hq * D, Hq, D, cos, cos + half, half, is_neox, qo + t * Hq * D);
      rotate_heads(kp + t * Hk * D, Hk, D, cos, cos + half, half, is_neox, ko + t * Hk * D);
    }
  });
}

at::Tensor silu_and_mul(const at::Tensor& input) {
  std::vector<int64_t> shape = input.sizes().vec();
  shape.back() /= 2;
  at::Tensor out = at::empty(shape, input.options());
  silu_and_mul_into(input, out);
  return out;
}

void silu_and_mul_into(const at::Tensor& input, at::Tensor& out) {
  RECORD_FUNCTION("sglang_cpu_cpp::silu_and_mul", std::vector<c10::IValue>());
  const at::Tensor x = float_rows(input, "silu_and_mul");
  const int64_t width = x.size(-1), half = width / 2, rows = x.numel() / width;
  TORCH_CHECK(out.is_contiguous() && out.numel() == rows * half && out.scalar_type() == at::kFloat,
              "silu_and_mul: output");
  const float* xp = x.data_ptr<float>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, rows, ROWS_PER_TASK, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      sgl_cpu_cpp::silu_mul_row(xp + r * width, xp + r * width + half, half, op + r * half);
    }
  });
}

}  // namespace sgl_cpu_cpp

TORCH_LIBRARY_FRAGMENT(sglang_cpu_cpp, m) {
  m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor");
  m.def("fused_add_rms_norm(Tensor x, Tensor residual, Tensor weight, float eps) -> (Tensor, Tensor)");
  m.def("apply_rotary(Tensor positions, Tensor q, Tensor k, Tensor cos_sin, bool is_neox) -> (Tensor, Tensor)");
  m.def("silu_and_mul(Tensor x) -> Tensor");
}

TORCH_LIBRARY_IMPL(sglang_cpu_cpp, CPU, m) {
  m.impl("rms_norm", &sgl_cpu_cpp::rms_norm);
  m.impl("fused_add_rms_norm", &sgl_cpu_cpp::fused_add_rms_norm);
  m.impl("apply_rotary", &sgl_cpu_cpp::apply_rotary);
  m.impl("silu_and_mul", &sgl_cpu_cpp::silu_and_mul);
}
