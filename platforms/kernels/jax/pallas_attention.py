"""Ragged paged attention through JAX's Pallas TPU kernel, for the same contract and KV layout
as the jax.numpy backend (which it subclasses); only bound where a TPU is present.

The Pallas kernel reads the cache but does not write it, so the new K/V are written first with
the same jax.numpy scatter. The kernel module is imported when the kernel first runs: importing
Pallas' TPU lowering on a host without a TPU is never needed.
"""

from __future__ import annotations

from sglang.platforms.kernels.jax.attention import RaggedPagedAttention
from sglang.platforms.kernels.jax.interop import jax_op
from sglang.platforms.kernels.jax.ragged_attention import write_kv, write_slots


def pallas_ragged_paged_attention(
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
):
    """Same arguments and results as `ragged_attention.ragged_paged_attention` (`max_q_len` is
    unused: the kernel tiles queries itself)."""
    from jax.experimental.pallas.ops.tpu.ragged_paged_attention import ragged_paged_attention

    num_seqs = distribution[2:3]
    slots = write_slots(kv_lens, page_indices, cu_q_lens, num_seqs[0], queries.shape[0], kv_pages.shape[1])
    kv_pages = write_kv(kv_pages, keys, values, slots)
    out = ragged_paged_attention(
        queries,
        kv_pages,
        kv_lens,
        page_indices,
        cu_q_lens,
        num_seqs,
        sm_scale=sm_scale,
        sliding_window=sliding_window,
        soft_cap=soft_cap,
    )
    return out, kv_pages


class PallasRaggedAttention(RaggedPagedAttention):
    kernel = staticmethod(jax_op(pallas_ragged_paged_attention))
