"""The conformance suites, shipped in the package so a vendor runs them from an installed wheel.

pytest modules (`test_*.py`) parametrized by device through `devices`; `sglang conformance` and
ci/matrix.py collect them with `--pyargs`, and the repository's own test run collects them by path.
"""
