// The extension module: the ops of every source as plain functions (see bindings.h).
#include "bindings.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  sgl_cpu_cpp::bind_linear(m);
  sgl_cpu_cpp::bind_attention(m);
  sgl_cpu_cpp::bind_glue(m);
}
