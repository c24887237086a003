"""Multi-adapter LoRA in jax.numpy: the torch_native family's masked dense form (two GEMMs over
every slot, each row keeping its own), which XLA compiles to plain matmuls of static shapes."""

from __future__ import annotations

from typing import Any

from sglang.platforms.kernels.jax.interop import jax_op


@jax_op
def lora_shrink(x: Any, a: Any, token_slots: Any) -> Any:
    import jax.numpy as jnp

    slots, width, hidden = a.shape
    every = (x.astype(jnp.float32) @ a.reshape(slots * width, hidden).astype(jnp.float32).T).reshape(-1, slots, width)
    mine = jnp.take_along_axis(every, token_slots.reshape(-1, 1, 1), axis=1)[:, 0, :]
    return mine.astype(x.dtype)


@jax_op
def lora_expand(y: Any, h: Any, b: Any, token_slots: Any, scaling: Any, out_widths: tuple[int, ...]) -> Any:
    import jax.numpy as jnp

    slots, _, rank = b.shape
    weights = (token_slots[:, None] == jnp.arange(slots)[None, :]).astype(jnp.float32) * scaling[None, :]
    parts = h.astype(jnp.float32).reshape(-1, len(out_widths), rank)
    deltas, start = [], 0
    for p, width in enumerate(out_widths):
        spread = (weights[:, :, None] * parts[:, None, p, :]).reshape(-1, slots * rank)
        side_by_side = b[:, start : start + width, :].astype(jnp.float32).transpose(1, 0, 2).reshape(width, -1)
        deltas.append(spread @ side_by_side.T)
        start += width
    return (y.astype(jnp.float32) + jnp.concatenate(deltas, axis=-1)).astype(y.dtype)
