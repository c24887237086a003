// The extension module: the ops of every source as plain functions (see ops.h). The only source
// that includes pybind11 and torch's Python bindings (its Tensor conversions).
#include <torch/csrc/utils/pybind.h>
#include "ops.h"
#include "step_tape.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using namespace sgl_cpu_cpp;
  m.def("int4_linear", &int4_linear);
  m.def("int8_linear", &int8_linear);
  m.def("int4_tiles", &int4_tiles);
  m.def("int8_tiles", &int8_tiles);
  m.def("decode_attention", &decode_attention);
  m.def("decode_attention_store", &decode_attention_store);
  m.def("mla_decode", &mla_decode);
  m.def("rms_norm", &rms_norm);
  m.def("fused_add_rms_norm", &fused_add_rms_norm);
  m.def("apply_rotary", &apply_rotary);
  m.def("silu_and_mul", &silu_and_mul);
  m.def("lora_shrink", &lora_shrink);
  m.def("lora_expand", &lora_expand);
  m.def("argmax", &argmax);
  pybind11::class_<StepTape>(m, "StepTape")
      .def(pybind11::init<>())
      .def("int4_linear", &StepTape::int4_linear)
      .def("int8_linear", &StepTape::int8_linear)
      .def("decode_attention", &StepTape::decode_attention)
      .def("decode_attention_store", &StepTape::decode_attention_store)
      .def("rms_norm", &StepTape::rms_norm)
      .def("fused_add_rms_norm", &StepTape::fused_add_rms_norm)
      .def("apply_rotary", &StepTape::apply_rotary)
      .def("silu_and_mul", &StepTape::silu_and_mul)
      .def("lora_shrink", &StepTape::lora_shrink)
      .def("lora_expand", &StepTape::lora_expand)
      .def("copy", &StepTape::copy)
      .def("index_select", &StepTape::index_select)
      .def("mul", &StepTape::mul)
      .def("add", &StepTape::add)
      .def("mm", &StepTape::mm)
      .def("addmm", &StepTape::addmm)
      .def("linear", &StepTape::linear)
      // The kernels hold no Python objects: other Python threads run while a step replays.
      .def("replay", &StepTape::replay, pybind11::call_guard<pybind11::gil_scoped_release>())
      .def("__len__", &StepTape::size);
}
