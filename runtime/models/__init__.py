"""Model architectures, all instances of one decoder written against `sglang.ops`."""

from sglang.runtime.models.registry import ARCHITECTURES, UnsupportedArchitectureError, model_class_for

__all__ = ["ARCHITECTURES", "UnsupportedArchitectureError", "model_class_for"]
