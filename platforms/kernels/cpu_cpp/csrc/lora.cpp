// Multi-adapter LoRA over a batch (the contract is ops/lora.py): shrink `h[t] = x[t] @ A[s]^T`
// and expand `out[t, o] = y[t, o] + scaling[s] * h[t, part(o)] . B[s, o]`, `s = token_slots[t]`.
//
// Why C++: torch has no per-row-weight matmul, so torch_native multiplies every row by every
// slot's weights and keeps its own (S times the work), and the reference gathers a weight copy
// per row. Here the rows are grouped by slot once per call (a counting sort of a few ints, no
// dispatch), and each run of one slot reads that slot's A and B once for all its rows:
// - rows of slot 0 (the base model's, all-zero weights by the contract) are skipped: their `h` is
//   zero and their `out` is `y`, exactly what the zero weights give; expand also skips slots of
//   zero scaling. A step of base rows costs one zero fill and one copy per projection.
// - shrink: per (run, row of A) one A row (H floats, in L1) dotted with each row of the run.
// - expand: per (run, block of 64 output columns of one fused part) the block of B is transposed
//   into a [R][64] tile, then each row of the run accumulates `h[t, r] * tile[r]` over the rank:
//   64-wide vector FMAs instead of one R-long horizontal sum per output.
// Work is split over threads by those items (a decode step has a handful of rows but hundreds of
// outputs). Arithmetic is float32 with one rounding per output, as the reference's; sums differ
// from it only by order.
#include "ops.h"
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/record_function.h>
#include <torch/library.h>
#include <vector>

namespace {

// Multiply-adds per task below which threads are not woken (a decode row runs inline).
constexpr int64_t WORK_PER_TASK = 16384;
// Output columns per expand tile: 64 floats, eight AVX2 registers of accumulators.
constexpr int64_t TILE = 64;

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

// The rows of the batch that take part, grouped by slot (in batch order within a slot), and
// the runs of one slot over them: run `i` is `rows[begin[i] .. begin[i + 1])` of `slot[i]`.
struct SlotRuns {
  std::vector<int64_t> rows, begin, slot;
};

// Rows whose slot `keep` accepts, grouped by slot; slots are checked against [0, S).
template <typename Keep>
SlotRuns slot_runs(const int64_t* slots, int64_t T, int64_t S, Keep keep) {
  std::vector<int64_t> count(S + 1, 0);
  for (int64_t t = 0; t < T; ++t) {
    TORCH_CHECK(slots[t] >= 0 && slots[t] < S, "lora: token slot ", slots[t], " outside [0, ", S, ")");
    if (keep(slots[t])) ++count[slots[t] + 1];
  }
  SlotRuns runs;
  for (int64_t s = 0; s < S; ++s) {
    if (count[s + 1] > 0) runs.slot.push_back(s), runs.begin.push_back(count[s]);
    count[s + 1] += count[s];
  }
  runs.begin.push_back(count[S]);
  runs.rows.resize(count[S]);
  for (int64_t t = 0; t < T; ++t)
    if (keep(slots[t])) runs.rows[count[slots[t]]++] = t;
  return runs;
}

}  // namespace

namespace sgl_cpu_cpp {

at::Tensor lora_shrink(const at::Tensor& input, const at::Tensor& weights, const at::Tensor& token_slots) {
  at::Tensor out = at::empty({input.size(0), weights.size(1)}, input.options());
  lora_shrink_into(input, weights, token_slots, out);
  return out;
}

void lora_shrink_into(const at::Tensor& input, const at::Tensor& weights, const at::Tensor& token_slots,
                      at::Tensor& out) {
  RECORD_FUNCTION("sglang_cpu_cpp::lora_shrink", std::vector<c10::IValue>());
  const at::Tensor x = float_contiguous(input, "lora_shrink"), a = float_contiguous(weights, "lora_shrink");
  TORCH_CHECK(x.dim() == 2 && a.dim() == 3 && a.size(2) == x.size(1), "lora_shrink: x [T, H], a [S, W, H]");
  const at::Tensor slots = token_slots.to(at::kLong).contiguous();
  const int64_t T = x.size(0), H = x.size(1), S = a.size(0), W = a.size(1);
  TORCH_CHECK(out.is_contiguous() && out.numel() == T * W && out.scalar_type() == at::kFloat, "lora_shrink: output");
  out.zero_();  // rows of the base model (slot 0) stay zero
  const SlotRuns runs = slot_runs(slots.data_ptr<int64_t>(), T, S, [](int64_t s) { return s != 0; });
  const int64_t items = static_cast<int64_t>(runs.slot.size()) * W;  // (run, row of A)
  if (items == 0) return;
  const float *xp = x.data_ptr<float>(), *ap = a.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const int64_t work = std::max<int64_t>(1, H * static_cast<int64_t>(runs.rows.size()) / static_cast<int64_t>(runs.slot.size()));
  at::parallel_for(0, items, std::max<int64_t>(1, WORK_PER_TASK / work), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const int64_t run = i / W, w = i % W;
      const float* a_row = ap + (runs.slot[run] * W + w) * H;
      for (int64_t k = runs.begin[run]; k < runs.begin[run + 1]; ++k) {
        const int64_t t = runs.rows[k];
        op[t * W + w] = dot(xp + t * H, a_row, H);
      }
    }
  });
}

at::Tensor lora_expand(const at::Tensor& base, const at::Tensor& shrunk, const at::Tensor& weights,
                       const at::Tensor& token_slots, const at::Tensor& scaling, at::IntArrayRef out_widths) {
  at::Tensor out = at::empty(base.sizes(), base.options());
  lora_expand_into(base, shrunk, weights, token_slots, scaling, out_widths, out);
  return out;
}

void lora_expand_into(const at::Tensor& base, const at::Tensor& shrunk, const at::Tensor& weights,
                      const at::Tensor& token_slots, const at::Tensor& scaling, at::IntArrayRef out_widths,
                      at::Tensor& out) {
  RECORD_FUNCTION("sglang_cpu_cpp::lora_expand", std::vector<c10::IValue>());
  const at::Tensor y = float_contiguous(base, "lora_expand"), h = float_contiguous(shrunk, "lora_expand");
  const at::Tensor b = float_contiguous(weights, "lora_expand"), scale = float_contiguous(scaling, "lora_expand");
  const int64_t T = y.size(0), O = y.size(1), S = b.size(0), R = b.size(2);
  const int64_t N = static_cast<int64_t>(out_widths.size());
  TORCH_CHECK(y.dim() == 2 && b.dim() == 3 && b.size(1) == O && h.size(1) == N * R && scale.numel() == S,
              "lora_expand: y [T, O], h [T, N * R], b [S, O, R], scaling [S]");
  const at::Tensor slots = token_slots.to(at::kLong).contiguous();
  const float* cp = scale.data_ptr<float>();
  TORCH_CHECK(out.is_contiguous() && out.sizes() == y.sizes() && out.scalar_type() == at::kFloat, "lora_expand: output");
  out.copy_(y);
  const SlotRuns runs =
      slot_runs(slots.data_ptr<int64_t>(), T, S, [cp](int64_t s) { return s != 0 && cp[s] != 0.f; });
  // Tiles of output columns, each inside one fused part: (first column, width, part).
  std::vector<int64_t> tile_start, tile_width, tile_part;
  for (int64_t p = 0, o = 0; p < N; o += out_widths[p], ++p)
    for (int64_t c = o; c < o + out_widths[p]; c += TILE)
      tile_start.push_back(c), tile_width.push_back(std::min(TILE, o + out_widths[p] - c)), tile_part.push_back(p);
  TORCH_CHECK(N == 0 || tile_start.empty() || tile_start.back() + tile_width.back() == O, "lora_expand: out_widths must sum to O");
  const int64_t tiles = static_cast<int64_t>(tile_start.size());
  const int64_t items = static_cast<int64_t>(runs.slot.size()) * tiles;  // (run, tile)
  if (items == 0) return;
  const float *hp = h.data_ptr<float>(), *bp = b.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const int64_t work = std::max<int64_t>(1, TILE * R * static_cast<int64_t>(runs.rows.size()) / static_cast<int64_t>(runs.slot.size()));
  at::parallel_for(0, items, std::max<int64_t>(1, WORK_PER_TASK / work), [&](int64_t b0, int64_t e) {
    std::vector<float> tile(R * TILE);
    float acc[TILE];
    for (int64_t i = b0; i < e; ++i) {
      const int64_t run = i / tiles, k = i % tiles, s = runs.slot[run];
      const int64_t o0 = tile_start[k], width = tile_width[k], part = tile_part[k];
      const float* block = bp + (s * O + o0) * R;
      for (int64_t j = 0; j < width; ++j)
        for (int64_t r = 0; r < R; ++r) tile[r * TILE + j] = block[j * R + r];
      const float c = cp[s];
      for (int64_t q = runs.begin[run]; q < runs.begin[run + 1]; ++q) {
        const int64_t t = runs.rows[q];
        const float* h_row = hp + t * N * R + part * R;
        for (int64_t j = 0; j < TILE; ++j) acc[j] = 0.f;
        for (int64_t r = 0; r < R; ++r) {
          const float hr = h_row[r];
          const float* tr = tile.data() + r * TILE;
#pragma omp simd
          for (int64_t j = 0; j < TILE; ++j) acc[j] += hr * tr[j];
        }
        float* o_row = op + t * O + o0;
        for (int64_t j = 0; j < width; ++j) o_row[j] += acc[j] * c;
      }
    }
  });
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
