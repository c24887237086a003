"""SGLang-compatible serving runtime and frontend language, hardware-abstraction first."""

__version__ = "0.1.0"

# The frontend language (`import sglang as sgl`), as upstream SGLang exports it.
from sglang.frontend import *  # noqa: F403
from sglang.frontend import __all__ as _frontend_all

__all__ = ["Engine", "__version__", *_frontend_all]  # noqa: F405 (Engine: lazily, below)


def __getattr__(name: str):
    # The runtime imports torch; `import sglang` for the frontend alone does not need it.
    if name == "Engine":
        from sglang.runtime.engine import Engine

        return Engine
    raise AttributeError(f"module 'sglang' has no attribute {name!r}")


# Upstream's module paths (`sglang.lang.*`, `sglang.global_config`) resolve to the frontend's modules.
from sglang.frontend.compat import install_lang_aliases  # noqa: E402

install_lang_aliases()
