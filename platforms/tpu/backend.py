"""Which JAX backend the tpu platform runs on, and JAX's settings for it.

The tpu platform runs on a TPU when JAX sees one, or on XLA:CPU when `JAX_PLATFORMS=cpu` asks for
it (machines without a TPU: CI, development). Everything that reports on the platform names the
backend with `backend_label`, so a run on XLA:CPU never reads as a TPU run.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

JAX_PLATFORMS_ENV = "JAX_PLATFORMS"
CACHE_DIR_ENV = "SGLANG_JAX_CACHE_DIR"
DEFAULT_CACHE_DIR = Path("~/.cache/sglang/jax").expanduser()


def xla_cpu_requested() -> bool:
    """`JAX_PLATFORMS=cpu`: JAX may use only its CPU backend."""
    return os.environ.get(JAX_PLATFORMS_ENV, "").strip().lower() == "cpu"


def tpu_runtime_installed() -> bool:
    """Whether JAX could find a TPU runtime: the `libtpu` package or `$TPU_LIBRARY_PATH`. Checked
    without importing JAX, whose backend probe logs "Unable to initialize backend 'tpu'" on every
    machine without one (a cpu server's start included)."""
    return bool(os.environ.get("TPU_LIBRARY_PATH")) or importlib.util.find_spec("libtpu") is not None


def tpu_devices() -> list:
    """JAX's TPU devices; raises (with JAX's reason) when there are none."""
    if not tpu_runtime_installed():
        raise RuntimeError("libtpu is not installed")
    import jax

    return jax.devices("tpu")


def backend_label() -> str:
    """`tpu platform on XLA:CPU`, or the TPU kind and count (`TPU v5 lite x4`)."""
    if xla_cpu_requested():
        return "tpu platform on XLA:CPU"
    devices = tpu_devices()
    return f"{devices[0].device_kind} x{len(devices)}"


def compilation_cache_dir() -> Path:
    return Path(os.environ.get(CACHE_DIR_ENV) or DEFAULT_CACHE_DIR)


def enable_persistent_cache() -> Path:
    """Points JAX's persistent compilation cache at `compilation_cache_dir()` and caches every
    compiled step (however quick to compile), so a second start compiles nothing."""
    import jax

    path = compilation_cache_dir()
    path.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return path
