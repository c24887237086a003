"""The aiter kernel family: AMD AITER kernels for ROCm (PyPI `amd-aiter`, import `aiter`)."""
