"""Conformance: the matrix, `sglang conformance`, and the suites they run (installed as `sglang.ci`)."""
