"""SGLang-compatible serving runtime and frontend language, hardware-abstraction first."""

__version__ = "0.1.0"

# The frontend language (`import sglang as sgl`), as upstream SGLang exports it.
from sglang.frontend import *  # noqa: F403
from sglang.frontend import __all__ as _frontend_all

__all__ = ["__version__", *_frontend_all]
