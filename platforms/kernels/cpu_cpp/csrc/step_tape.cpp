// The step tape's calls (see step_tape.h). Each records its arguments by value: a tensor argument
// is a reference to the recorded tensor's storage, which the tape thereby keeps alive.
#include "step_tape.h"
#include <ATen/ops/add.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/mul.h>

namespace sgl_cpu_cpp {

void StepTape::int4_linear(at::Tensor x, at::Tensor packed, at::Tensor scales, at::Tensor offsets, int64_t group,
                           at::Tensor tiles, Bias bias, at::Tensor out) {
  calls_.emplace_back([=]() mutable { int4_linear_into(x, packed, scales, offsets, group, tiles, bias, out); });
}

void StepTape::int8_linear(at::Tensor x, at::Tensor qweight, at::Tensor scales, int64_t group, at::Tensor tiles,
                           Bias bias, at::Tensor out) {
  calls_.emplace_back([=]() mutable { int8_linear_into(x, qweight, scales, group, tiles, bias, out); });
}

void StepTape::decode_attention(at::Tensor q, at::Tensor kv, at::Tensor slots, at::Tensor starts, double scale,
                                int64_t window, double softcap, Bias sinks, at::Tensor out) {
  calls_.emplace_back(
      [=]() mutable { decode_attention_into(q, kv, slots, starts, scale, window, softcap, sinks, out); });
}

void StepTape::decode_attention_store(at::Tensor q, at::Tensor k, at::Tensor v, at::Tensor kv, at::Tensor new_slots,
                                      at::Tensor slots, at::Tensor starts, double scale, int64_t window,
                                      double softcap, Bias sinks, at::Tensor out) {
  calls_.emplace_back([=]() mutable {
    decode_attention_store_into(q, k, v, kv, new_slots, slots, starts, scale, window, softcap, sinks, out);
  });
}

void StepTape::rms_norm(at::Tensor x, at::Tensor weight, double eps, at::Tensor out) {
  calls_.emplace_back([=]() mutable { rms_norm_into(x, weight, eps, out); });
}

void StepTape::fused_add_rms_norm(at::Tensor x, at::Tensor residual, at::Tensor weight, double eps, at::Tensor out,
                                  at::Tensor summed) {
  calls_.emplace_back([=]() mutable { fused_add_rms_norm_into(x, residual, weight, eps, out, summed); });
}

void StepTape::apply_rotary(at::Tensor positions, at::Tensor q, at::Tensor k, at::Tensor cos_sin, bool is_neox,
                            at::Tensor q_out, at::Tensor k_out) {
  calls_.emplace_back([=]() mutable { apply_rotary_into(positions, q, k, cos_sin, is_neox, q_out, k_out); });
}

void StepTape::silu_and_mul(at::Tensor x, at::Tensor out) {
  calls_.emplace_back([=]() mutable { silu_and_mul_into(x, out); });
}

void StepTape::lora_shrink(at::Tensor x, at::Tensor weights, at::Tensor token_slots, at::Tensor out) {
  calls_.emplace_back([=]() mutable { lora_shrink_into(x, weights, token_slots, out); });
}

void StepTape::lora_expand(at::Tensor base, at::Tensor shrunk, at::Tensor weights, at::Tensor token_slots,
                           at::Tensor scaling, std::vector<int64_t> out_widths, at::Tensor out) {
  calls_.emplace_back(
      [=]() mutable { lora_expand_into(base, shrunk, weights, token_slots, scaling, out_widths, out); });
}

void StepTape::copy(at::Tensor dst, at::Tensor src) {
  calls_.emplace_back([=]() mutable { dst.copy_(src); });
}

void StepTape::index_select(at::Tensor src, int64_t dim, at::Tensor index, at::Tensor out) {
  calls_.emplace_back([=]() mutable { at::index_select_out(out, src, dim, index); });
}

void StepTape::mul(at::Tensor a, at::Tensor b, at::Tensor out) {
  calls_.emplace_back([=]() mutable { at::mul_out(out, a, b); });
}

void StepTape::add(at::Tensor a, at::Tensor b, at::Tensor out) {
  calls_.emplace_back([=]() mutable { at::add_out(out, a, b); });
}

void StepTape::mm(at::Tensor a, at::Tensor b, at::Tensor out) {
  calls_.emplace_back([=]() mutable { at::mm_out(out, a, b); });
}

void StepTape::addmm(at::Tensor bias, at::Tensor a, at::Tensor b, at::Tensor out) {
  calls_.emplace_back([=]() mutable { at::addmm_out(out, bias, a, b); });
}

void StepTape::linear(at::Tensor x, at::Tensor weight, Bias bias, at::Tensor out) {
  calls_.emplace_back([=]() mutable { at::linear_out(out, x, weight, bias); });
}

void StepTape::replay() const {
  for (const auto& call : calls_) call();
}

}  // namespace sgl_cpu_cpp
