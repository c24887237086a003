"""Tests of the tpu platform (torchax on JAX), run on XLA:CPU where no TPU is present."""
