"""Tensor-parallel tests: ranks are real processes joined over gloo on loopback."""
