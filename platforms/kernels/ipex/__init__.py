"""The ipex kernel family: Intel GPU kernels from intel_extension_for_pytorch."""
