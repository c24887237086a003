"""`--kv-cache-dtype`: the KV pool's dtype, by upstream SGLang's names.

`auto` keeps the model's dtype. Another is given to the attention backend only where the backend
declares it (`AttentionBackend.kv_cache_dtypes`: every path of its `forward` rounds K/V to the
pool's dtype when storing and widens them when reading), and refused at startup otherwise, naming
the backend: a pool its kernels would misread must never be allocated.
"""

from __future__ import annotations

import torch

from sglang.ops.attention import AttentionBackend

KV_CACHE_DTYPES: dict[str, torch.dtype | str | None] = {
    "auto": None,
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
    "fp8_e5m2": torch.float8_e5m2,
    "fp8_e4m3": torch.float8_e4m3fn,
    "fp4_e2m1": "an mxfp4 pool keeps a scale per block of values, which no backend here stores",
}
"""Upstream's names: the dtype each means, None for the model's own, or why none serves it."""


def kv_pool_dtype(name: str, backend: AttentionBackend) -> torch.dtype:
    """The pool dtype `--kv-cache-dtype name` gives `backend`. Raises ValueError with the reason
    where the backend does not declare it."""
    if name not in KV_CACHE_DTYPES:
        raise ValueError(f"--kv-cache-dtype {name}: not one of {', '.join(KV_CACHE_DTYPES)}")
    meant = KV_CACHE_DTYPES[name]
    if meant is None:
        return backend.dtype
    if isinstance(meant, str):
        raise ValueError(f"--kv-cache-dtype {name}: {meant}")
    if meant == backend.dtype or meant in backend.kv_cache_dtypes:
        return meant
    served = " or ".join(str(dtype).removeprefix("torch.") for dtype in (backend.dtype, *backend.kv_cache_dtypes))
    raise ValueError(
        f"--kv-cache-dtype {name}: {type(backend).__name__} reads a KV pool of {served} only "
        f"({str(backend.dtype).removeprefix('torch.')} is the model's dtype, what auto gives)"
    )
