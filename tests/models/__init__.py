"""Tests of the model implementations: loading, module calls, quantized and real-model outputs."""
