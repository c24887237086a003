// A step tape: one captured decode step as the list of kernel calls it made, over the tensors it
// made them with, replayed from C++ (platforms/kernels/cpu_cpp/step_tape.py records it).
//
// Why: a batch-1 decode step of the embedded model is about 280 kernel calls and 150 views. Replayed
// by TorchScript's interpreter, every call is dispatched, allocates its outputs and every view is
// rebuilt; replayed from a tape, each call is one indirect call into the kernel, writing the output
// buffers it wrote when recorded. Views need no replay: they alias buffers the tape keeps.
//
// Invariants: every tensor a call reads or writes is held by the tape, so its storage outlives the
// tape and a replay reads what the recorded step's inputs hold now (static ids, positions and
// attention metadata, KV pools updated in place); calls replay in recorded order; nothing
// allocates except what a kernel does inside (a non-contiguous input's copy).
#pragma once
#include "ops.h"
#include <functional>
#include <vector>

namespace sgl_cpu_cpp {

class StepTape {
 public:
  using Bias = std::optional<at::Tensor>;

  // The family's kernels, into the recorded outputs.
  void int4_linear(at::Tensor x, at::Tensor packed, at::Tensor scales, at::Tensor offsets, int64_t group,
                   at::Tensor tiles, Bias bias, at::Tensor out);
  void int8_linear(at::Tensor x, at::Tensor qweight, at::Tensor scales, int64_t group, at::Tensor tiles, Bias bias,
                   at::Tensor out);
  void decode_attention(at::Tensor q, at::Tensor kv, at::Tensor slots, at::Tensor starts, double scale,
                        int64_t window, double softcap, Bias sinks, at::Tensor out);
  void decode_attention_store(at::Tensor q, at::Tensor k, at::Tensor v, at::Tensor kv, at::Tensor new_slots,
                              at::Tensor slots, at::Tensor starts, double scale, int64_t window, double softcap,
                              Bias sinks, at::Tensor out);
  void rms_norm(at::Tensor x, at::Tensor weight, double eps, at::Tensor out);
  void fused_add_rms_norm(at::Tensor x, at::Tensor residual, at::Tensor weight, double eps, at::Tensor out,
                          at::Tensor summed);
  void apply_rotary(at::Tensor positions, at::Tensor q, at::Tensor k, at::Tensor cos_sin, bool is_neox,
                    at::Tensor q_out, at::Tensor k_out);
  void silu_and_mul(at::Tensor x, at::Tensor out);
  void lora_shrink(at::Tensor x, at::Tensor weights, at::Tensor token_slots, at::Tensor out);
  void lora_expand(at::Tensor base, at::Tensor shrunk, at::Tensor weights, at::Tensor token_slots, at::Tensor scaling,
                   std::vector<int64_t> out_widths, at::Tensor out);

  // The few torch ops of a step outside the family: an int8 embedding row's dequantization, and
  // a dense layer's embedding and matmuls.
  void copy(at::Tensor dst, at::Tensor src);
  void index_select(at::Tensor src, int64_t dim, at::Tensor index, at::Tensor out);
  void mul(at::Tensor a, at::Tensor b, at::Tensor out);
  void add(at::Tensor a, at::Tensor b, at::Tensor out);
  void mm(at::Tensor a, at::Tensor b, at::Tensor out);
  void addmm(at::Tensor bias, at::Tensor a, at::Tensor b, at::Tensor out);
  void linear(at::Tensor x, at::Tensor weight, Bias bias, at::Tensor out);

  void replay() const;
  int64_t size() const { return static_cast<int64_t>(calls_.size()); }

 private:
  std::vector<std::function<void()>> calls_;
};

}  // namespace sgl_cpu_cpp
