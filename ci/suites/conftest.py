"""The suites' shared fixtures (see `fixtures`)."""

from sglang.ci.suites.fixtures import checkpoints, target

__all__ = ["checkpoints", "target"]
