"""SGLang-compatible serving runtime and frontend language, hardware-abstraction first."""

__version__ = "0.1.0"
