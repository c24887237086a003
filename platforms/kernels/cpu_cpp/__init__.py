"""Weight-only int8/int4 linear kernels for host tensors (AVX2/FMA where the CPU has it)."""
