"""Calling a jax.numpy function from torch code, inside or outside a jitted torchax step.

Inside the tpu platform's jitted step, tensors are torchax tensors wrapping JAX tracers: they are
viewed as JAX arrays and the results wrapped back, so the function is traced into the step.
Outside it (op parity, eager use) tensors are ordinary host torch tensors: they are handed to JAX
(zero-copy through DLPack where JAX allows it) and the results come back as host torch tensors.
Non-tensor arguments pass through unchanged (they are static under jit).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

import torch

from sglang.platforms.tpu.torchax_compat import import_torchax


def _torchax_tensor_type() -> type:
    return import_torchax().tensor.Tensor


def _to_jax(value: Any, wrapped: type) -> Any:
    import jax.numpy as jnp

    if isinstance(value, wrapped):
        return value.jax()
    if isinstance(value, torch.Tensor):
        tensor = value.detach().contiguous()
        if tensor.dtype == torch.bfloat16:
            # numpy has no bfloat16: go through DLPack, which JAX reads zero-copy.
            import jax.dlpack

            return jax.dlpack.from_dlpack(tensor)
        return jnp.asarray(tensor.numpy())
    if isinstance(value, (tuple, list)):
        return type(value)(_to_jax(v, wrapped) for v in value)
    return value


def _to_torch(value: Any, as_torchax: bool) -> Any:
    import jax
    import numpy as np

    if isinstance(value, jax.Array):
        if as_torchax:
            torchax = import_torchax()
            return torchax.tensor.Tensor(value, torchax.default_env())
        if value.dtype == jax.numpy.bfloat16:
            return torch.from_dlpack(value)
        return torch.from_numpy(np.array(value))
    if isinstance(value, (tuple, list)):
        return type(value)(_to_torch(v, as_torchax) for v in value)
    return value


def jax_op(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wraps a function of JAX arrays so torch code calls it with torch tensors (see module doc)."""

    @wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        wrapped = _torchax_tensor_type()
        traced = any(isinstance(a, wrapped) for a in (*args, *kwargs.values()))
        jax_args = [_to_jax(a, wrapped) for a in args]
        jax_kwargs = {k: _to_jax(v, wrapped) for k, v in kwargs.items()}
        return _to_torch(fn(*jax_args, **jax_kwargs), traced)

    return call
