"""Ragged paged attention in jax.numpy, with the shape contract of tpu-inference's
`ragged_paged_attention`, so the Pallas TPU kernel can take its place on a TPU.

Contract (all shapes static; only the first `distribution[2]` sequences are real):
- `queries` `[T, Hq, D]`, `keys`/`values` `[T, Hk, D]`: the step's new tokens, sequence after
  sequence; rows past `cu_q_lens[num_seqs]` are padding.
- `kv_pages` `[num_pages, page_size, 2 * Hk, D]`: keys at even combined heads, values at odd ones.
- `kv_lens` `i32[S]`: tokens of each sequence in the cache after this step (its new ones included).
- `page_indices` `i32[S, P]`: the pages of each sequence in order; unused entries point at page 0,
  the padding page no sequence owns.
- `cu_q_lens` `i32[S + 1]`: cumulative new-token counts (a padded sequence repeats the last value).
- `distribution` `i32[3]`: cumulative counts of decode sequences (one new token), single-chunk
  prefills and mixed sequences: decodes first. `distribution[2]` is the number of sequences.

`sinks` `[Hq]` (optional, gpt-oss): a learned logit per query head that joins the softmax's
denominator with no value. tpu-inference's Pallas kernel takes none, so only this one serves it.

`ragged_paged_attention` writes the new keys and values into their pages (padding rows write
into page 0) and returns the attention output and the written pages: JAX arrays are immutable,
so the caller replaces its buffer with the returned one.

Each sequence's queries are computed as one block of `max_q_len` rows against its own
`P * page_size` keys, so the work is `S * max_q_len * P * page_size` per head whatever the mix.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp

MASK_VALUE = -0.7 * float(jnp.finfo(jnp.float32).max)


def token_layout(cu_q_lens: jax.Array, num_tokens: int, num_seqs: jax.Array) -> tuple[jax.Array, ...]:
    """Per token: its sequence, its index among that sequence's new tokens, whether it is real."""
    t = jnp.arange(num_tokens, dtype=jnp.int32)
    seq = jnp.searchsorted(cu_q_lens[1:], t, side="right").astype(jnp.int32)
    seq = jnp.minimum(seq, cu_q_lens.shape[0] - 2)
    real = t < cu_q_lens[num_seqs]
    return seq, t - cu_q_lens[seq], real


def write_slots(kv_lens, page_indices, cu_q_lens, num_seqs, num_tokens: int, page_size: int) -> jax.Array:
    """The flat cache slot (`page * page_size + offset`) each new token is written to; 0 for padding."""
    seq, index, real = token_layout(cu_q_lens, num_tokens, num_seqs)
    q_len = cu_q_lens[seq + 1] - cu_q_lens[seq]
    position = kv_lens[seq] - q_len + index
    page = page_indices[seq, jnp.clip(position // page_size, 0, page_indices.shape[1] - 1)]
    return jnp.where(real, page * page_size + position % page_size, 0)


def write_kv(kv_pages: jax.Array, keys: jax.Array, values: jax.Array, slots: jax.Array) -> jax.Array:
    """`kv_pages` with token `t`'s key and value at flat slot `slots[t]`."""
    num_pages, page_size, combined, head_dim = kv_pages.shape
    interleaved = jnp.stack([keys, values], axis=2).reshape(keys.shape[0], combined, head_dim)
    flat = kv_pages.reshape(num_pages * page_size, combined, head_dim)
    return flat.at[slots].set(interleaved.astype(kv_pages.dtype)).reshape(kv_pages.shape)


def paged_attention(
    queries,
    kv_pages,
    kv_lens,
    page_indices,
    cu_q_lens,
    num_seqs,
    *,
    sm_scale: float,
    max_q_len: int,
    sliding_window: int | None = None,
    soft_cap: float | None = None,
    sinks: jax.Array | None = None,
) -> jax.Array:
    """Attention of the new tokens over the cache (which already holds them): `[T, Hq, D]`."""
    num_tokens, num_q_heads, head_dim = queries.shape
    combined = kv_pages.shape[2]
    kv_heads, num_seqs_padded = combined // 2, kv_lens.shape[0]
    group = num_q_heads // kv_heads
    q_lens = cu_q_lens[1:] - cu_q_lens[:-1]
    rows = jnp.arange(max_q_len, dtype=jnp.int32)
    q_index = jnp.clip(cu_q_lens[:-1, None] + rows[None, :], 0, num_tokens - 1)
    q_block = queries[q_index].reshape(num_seqs_padded, max_q_len, kv_heads, group, head_dim)
    pages = kv_pages[page_indices]  # [S, P, page_size, 2Hk, D]
    keys = pages[..., 0::2, :].reshape(num_seqs_padded, -1, kv_heads, head_dim)
    values = pages[..., 1::2, :].reshape(num_seqs_padded, -1, kv_heads, head_dim)
    kv_pos = jnp.arange(keys.shape[1], dtype=jnp.int32)
    # Slots past a sequence's length hold anything (another sequence's K/V, NaN): a zero weight
    # times NaN is NaN, so those values are zeroed, not only their scores masked.
    in_seq = kv_pos[None, :] < kv_lens[:, None]
    values = jnp.where(in_seq[:, :, None, None], values, 0)
    scores = jnp.einsum("sqkgd,slkd->skgql", q_block, keys, preferred_element_type=jnp.float32) * sm_scale
    if soft_cap is not None:
        scores = soft_cap * jnp.tanh(scores / soft_cap)
    q_pos = (kv_lens - q_lens)[:, None] + rows[None, :]  # [S, Q]
    visible = kv_pos[None, None, :] <= q_pos[:, :, None]
    if sliding_window is not None:
        visible &= kv_pos[None, None, :] > q_pos[:, :, None] - sliding_window
    scores = jnp.where(visible[:, None, None], scores, MASK_VALUE)
    probs = jax.nn.softmax(scores, axis=-1) if sinks is None else _softmax_with_sinks(scores, sinks, kv_heads, group)
    out = jnp.einsum("skgql,slkd->sqkgd", probs, values.astype(jnp.float32))
    out = out.reshape(num_seqs_padded, max_q_len, num_q_heads, head_dim)
    seq, index, real = token_layout(cu_q_lens, num_tokens, num_seqs)
    gathered = out[seq, jnp.clip(index, 0, max_q_len - 1)]
    return jnp.where(real[:, None, None], gathered, 0.0).astype(queries.dtype)


def _softmax_with_sinks(scores: jax.Array, sinks: jax.Array, kv_heads: int, group: int) -> jax.Array:
    """Softmax over the last axis of `scores` `[S, Hk, G, Q, L]` whose denominator also holds
    `exp(sink)` of the query head (`hk * G + g`), a column with no value."""
    sink = sinks.astype(jnp.float32).reshape(1, kv_heads, group, 1, 1)
    peak = jnp.maximum(scores.max(axis=-1, keepdims=True), sink)
    numerators = jnp.exp(scores - peak)
    return numerators / (numerators.sum(axis=-1, keepdims=True) + jnp.exp(sink - peak))


@partial(jax.jit, static_argnames=("sm_scale", "max_q_len", "sliding_window", "soft_cap"))
def ragged_paged_attention(
    queries,
    keys,
    values,
    kv_pages,
    kv_lens,
    page_indices,
    cu_q_lens,
    distribution,
    *,
    sm_scale: float,
    max_q_len: int,
    sliding_window: int | None = None,
    soft_cap: float | None = None,
    sinks: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Writes the new K/V, then attends; returns `(output [T, Hq, D], written kv_pages)`.
    `max_q_len` (static) bounds every sequence's new tokens. Jitted on its own, so an eager call
    (op parity) runs as one compiled computation; inside a jitted step it is inlined."""
    num_seqs = distribution[2]
    page_size = kv_pages.shape[1]
    slots = write_slots(kv_lens, page_indices, cu_q_lens, num_seqs, queries.shape[0], page_size)
    kv_pages = write_kv(kv_pages, keys, values, slots)
    out = paged_attention(
        queries,
        kv_pages,
        kv_lens,
        page_indices,
        cu_q_lens,
        num_seqs,
        sm_scale=sm_scale,
        max_q_len=max_q_len,
        sliding_window=sliding_window,
        soft_cap=soft_cap,
        sinks=sinks,
    )
    return out, kv_pages
