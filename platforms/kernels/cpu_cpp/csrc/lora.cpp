// Multi-adapter LoRA over a batch (the contract is ops/lora.py): shrink `h[t] = x[t] @ A[s]^T`
// and expand `out[t, o] = y[t, o] + scaling[s] * h[t, part(o)] . B[s, o]`, `s = token_slots[t]`.
//
// Why C++: torch has no per-row-weight matmul, so torch_native multiplies every row by every
// slot's weights and keeps its own (S times the work), and the reference gathers a weight copy
// per row. Here each row reads only its slot's rows of A and B, in place. Work is split over
// threads by output values (a decode step has a handful of rows but hundreds of outputs).
// Arithmetic is float32 with one rounding per output, as the reference's; sums differ from it
// only by order. A row whose slot has zero scaling (the base model's) keeps `y` exactly.
#include "ops.h"
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/record_function.h>
#include <torch/library.h>

namespace {

// Multiply-adds per task below which threads are not woken (a decode row runs inline).
constexpr int64_t WORK_PER_TASK = 16384;

at::Tensor float_contiguous(const at::Tensor& x, const char* op) {
  TORCH_CHECK(x.scalar_type() == at::kFloat, op, ": float32 only");
  return x.contiguous();
}

inline float dot(const float* x, const float* w, int64_t n) {
  float sum = 0.f;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += x[i] * w[i];
  return sum;
}

// Calls `body(t, j)` for the flat indices [begin, end) of a [rows, cols] grid, in row order.
template <typename Body>
inline void for_cells(int64_t begin, int64_t end, int64_t cols, Body body) {
  int64_t t = begin / cols, j = begin % cols;
  for (int64_t i = begin; i < end; ++i) {
    body(t, j);
    if (++j == cols) j = 0, ++t;
  }
}

}  // namespace

namespace sgl_cpu_cpp {

at::Tensor lora_shrink(const at::Tensor& input, const at::Tensor& weights, const at::Tensor& token_slots) {
  RECORD_FUNCTION("sglang_cpu_cpp::lora_shrink", std::vector<c10::IValue>());
  const at::Tensor x = float_contiguous(input, "lora_shrink"), a = float_contiguous(weights, "lora_shrink");
  TORCH_CHECK(x.dim() == 2 && a.dim() == 3 && a.size(2) == x.size(1), "lora_shrink: x [T, H], a [S, W, H]");
  const at::Tensor slots = token_slots.to(at::kLong).contiguous();
  const int64_t T = x.size(0), H = x.size(1), W = a.size(1);
  at::Tensor out = at::empty({T, W}, x.options());
  const float *xp = x.data_ptr<float>(), *ap = a.data_ptr<float>();
  const int64_t* sp = slots.data_ptr<int64_t>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, T * W, std::max<int64_t>(1, WORK_PER_TASK / std::max<int64_t>(H, 1)), [&](int64_t b, int64_t e) {
    for_cells(b, e, W, [&](int64_t t, int64_t w) { op[t * W + w] = dot(xp + t * H, ap + (sp[t] * W + w) * H, H); });
  });
  return out;
}

at::Tensor lora_expand(const at::Tensor& base, const at::Tensor& shrunk, const at::Tensor& weights,
                       const at::Tensor& token_slots, const at::Tensor& scaling, at::IntArrayRef out_widths) {
  RECORD_FUNCTION("sglang_cpu_cpp::lora_expand", std::vector<c10::IValue>());
  const at::Tensor y = float_contiguous(base, "lora_expand"), h = float_contiguous(shrunk, "lora_expand");
  const at::Tensor b = float_contiguous(weights, "lora_expand"), scale = float_contiguous(scaling, "lora_expand");
  const int64_t T = y.size(0), O = y.size(1), R = b.size(2), N = static_cast<int64_t>(out_widths.size());
  TORCH_CHECK(y.dim() == 2 && b.dim() == 3 && b.size(1) == O && h.size(1) == N * R,
              "lora_expand: y [T, O], h [T, N * R], b [S, O, R]");
  std::vector<int64_t> part_of(O);  // the fused part each output column belongs to
  for (int64_t p = 0, o = 0; p < N; ++p)
    for (int64_t k = 0; k < out_widths[p]; ++k) part_of.at(o++) = p;
  const at::Tensor slots = token_slots.to(at::kLong).contiguous();
  at::Tensor out = at::empty_like(y);
  const float *yp = y.data_ptr<float>(), *hp = h.data_ptr<float>(), *bp = b.data_ptr<float>();
  const float* cp = scale.data_ptr<float>();
  const int64_t* sp = slots.data_ptr<int64_t>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, T * O, std::max<int64_t>(1, WORK_PER_TASK / std::max<int64_t>(R, 1)), [&](int64_t b0, int64_t e) {
    for_cells(b0, e, O, [&](int64_t t, int64_t o) {
      const int64_t s = sp[t];
      const float c = cp[s];
      const float delta = c == 0.f ? 0.f : dot(hp + t * N * R + part_of[o] * R, bp + (s * O + o) * R, R) * c;
      op[t * O + o] = yp[t * O + o] + delta;
    });
  });
  return out;
}

}  // namespace sgl_cpu_cpp

TORCH_LIBRARY_FRAGMENT(sglang_cpu_cpp, m) {
  m.def("lora_shrink(Tensor x, Tensor a, Tensor token_slots) -> Tensor");
  m.def("lora_expand(Tensor y, Tensor h, Tensor b, Tensor token_slots, Tensor scaling, int[] out_widths) -> Tensor");
}

TORCH_LIBRARY_IMPL(sglang_cpu_cpp, CPU, m) {
  m.impl("lora_shrink", &sgl_cpu_cpp::lora_shrink);
  m.impl("lora_expand", &sgl_cpu_cpp::lora_expand);
}
