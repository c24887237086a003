"""Process-wide settings of the frontend (upstream SGLang's `global_config`)."""

from __future__ import annotations

import contextvars
from dataclasses import dataclass
from typing import Any


@dataclass
class GlobalConfig:
    default_backend: Any = None
    # 0 silent; 2 prints each program's text when it finishes a run.
    verbosity: int = 0
    # Before run_batch, trace the program and prefill its constant prefix once (cache warm-up).
    enable_precache_with_tracing: bool = True
    # Shorter prefixes are not worth a request of their own.
    precache_min_chars: int = 64
    skip_special_tokens_in_output: bool = True
    spaces_between_special_tokens_in_out: bool = True


global_config = GlobalConfig()

# The backend of the program running on this thread, so an sgl function called from inside a
# program runs on its caller's backend rather than the global default.
current_backend: contextvars.ContextVar[Any] = contextvars.ContextVar("sgl_current_backend", default=None)


def resolve_backend(backend: Any) -> Any:
    """The backend to run on: the given one, the caller program's, or the default; a Runtime's endpoint."""
    backend = backend or current_backend.get() or global_config.default_backend
    if backend is None:
        raise ValueError("no backend: pass backend=... or call sgl.set_default_backend(...) first")
    return getattr(backend, "endpoint", backend)
