// The family's ops, declared once with ATen's tensor type only: the kernel sources define them and
// register them with torch's dispatcher (TORCH_LIBRARY: torch.ops.sglang_cpu_cpp, what
// torch.compile traces, with fakes in build.py), and bindings.cpp, the one source that includes
// pybind11 and torch's Python headers, also binds them as plain functions of the extension module.
//
// Why both: from Python a dispatcher call costs about 4.4 us against 2.0 us for a direct one
// (measured here), and a decode step makes about 270 of these calls. Each op opens a
// RECORD_FUNCTION scope, so torch.profiler still names it when called directly.
//
// Why this header is small: `<torch/extension.h>` (torch's C++ API, autograd, pybind11) took most
// of each source's compile time, and the kernels use none of it.
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>
#include <optional>
#include <tuple>

namespace sgl_cpu_cpp {

// quant_linear.cpp
at::Tensor int4_linear(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& scales,
                       const at::Tensor& offsets, int64_t group, const at::Tensor& tiles,
                       const std::optional<at::Tensor>& bias);
at::Tensor int8_linear(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& scales, int64_t group,
                       const at::Tensor& tiles, const std::optional<at::Tensor>& bias);
at::Tensor int4_tiles(const at::Tensor& packed, const at::Tensor& scales, const at::Tensor& offsets, int64_t group);
at::Tensor int8_tiles(const at::Tensor& qweight, const at::Tensor& scales, int64_t group);

// decode_attention.cpp
// `window` <= 0: none; `softcap` <= 0: none; `sinks` [H] (gpt-oss) or none.
at::Tensor decode_attention(const at::Tensor& q, const at::Tensor& kv, const at::Tensor& slots,
                            const at::Tensor& starts, double scale, int64_t window, double softcap,
                            const std::optional<at::Tensor>& sinks);
at::Tensor decode_attention_store(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, at::Tensor kv,
                                  const at::Tensor& new_slots, const at::Tensor& slots, const at::Tensor& starts,
                                  double scale, int64_t window, double softcap,
                                  const std::optional<at::Tensor>& sinks);
at::Tensor mla_decode(const at::Tensor& query, const at::Tensor& kv, const at::Tensor& slots, const at::Tensor& starts,
                      int64_t rank, double scale);

// decode_glue.cpp
at::Tensor rms_norm(const at::Tensor& input, const at::Tensor& weight, double eps);
std::tuple<at::Tensor, at::Tensor> fused_add_rms_norm(const at::Tensor& input, const at::Tensor& res,
                                                      const at::Tensor& weight, double eps);
std::tuple<at::Tensor, at::Tensor> apply_rotary(const at::Tensor& positions, const at::Tensor& q,
                                                const at::Tensor& k, const at::Tensor& cos_sin, bool is_neox);
at::Tensor silu_and_mul(const at::Tensor& input);

// The same ops into outputs the caller owns (contiguous, float32, the shapes the ops above
// allocate): a step tape's replays (step_tape.h) write the buffers it recorded, allocating nothing.
void int4_linear_into(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& scales,
                      const at::Tensor& offsets, int64_t group, const at::Tensor& tiles,
                      const std::optional<at::Tensor>& bias, at::Tensor& out);
void int8_linear_into(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& scales, int64_t group,
                      const at::Tensor& tiles, const std::optional<at::Tensor>& bias, at::Tensor& out);
void decode_attention_into(const at::Tensor& q, const at::Tensor& kv, const at::Tensor& slots,
                           const at::Tensor& starts, double scale, int64_t window, double softcap,
                           const std::optional<at::Tensor>& sinks, at::Tensor& out);
void decode_attention_store_into(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, at::Tensor& kv,
                                 const at::Tensor& new_slots, const at::Tensor& slots, const at::Tensor& starts,
                                 double scale, int64_t window, double softcap,
                                 const std::optional<at::Tensor>& sinks, at::Tensor& out);
void rms_norm_into(const at::Tensor& input, const at::Tensor& weight, double eps, at::Tensor& out);
void fused_add_rms_norm_into(const at::Tensor& input, const at::Tensor& res, const at::Tensor& weight, double eps,
                             at::Tensor& out, at::Tensor& summed);
void apply_rotary_into(const at::Tensor& positions, const at::Tensor& q, const at::Tensor& k,
                       const at::Tensor& cos_sin, bool is_neox, at::Tensor& q_out, at::Tensor& k_out);
void silu_and_mul_into(const at::Tensor& input, at::Tensor& out);
void lora_shrink_into(const at::Tensor& input, const at::Tensor& weights, const at::Tensor& token_slots,
                      at::Tensor& out);
void lora_expand_into(const at::Tensor& base, const at::Tensor& shrunk, const at::Tensor& weights,
                      const at::Tensor& token_slots, const at::Tensor& scaling, at::IntArrayRef out_widths,
                      at::Tensor& out);

// lora.cpp
at::Tensor lora_shrink(const at::Tensor& input, const at::Tensor& weights, const at::Tensor& token_slots);
at::Tensor lora_expand(const at::Tensor& base, const at::Tensor& shrunk, const at::Tensor& weights,
                       const at::Tensor& token_slots, const at::Tensor& scaling, at::IntArrayRef out_widths);

// argmax.cpp
// Each row's index of its largest value, as torch.argmax: the first maximum, a NaN above all.
at::Tensor argmax(const at::Tensor& logits);

}  // namespace sgl_cpu_cpp
