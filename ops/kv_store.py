"""Writing new keys and values into a layer's KV buffer.

The default buffer layout is `[2, num_slots, num_kv_heads, head_dim]` (keys then values); slot
`s` of page `p` is `p * page_size + offset`. A backend that wants another layout declares it
through `AttentionBackend.kv_buffer_shape` and provides its own store.
"""

from __future__ import annotations

import torch


def store_kv(kv_buffer: torch.Tensor, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Writes `k`, `v` `[T, Hk, D]` at `slots` `[T]` and hands back the buffer it wrote.

    This reference mutates in place and returns the same tensor; a functional platform returns a
    new buffer instead, and callers always use the returned one.
    """
    kv_buffer[0].index_copy_(0, slots, k.to(kv_buffer.dtype))
    kv_buffer[1].index_copy_(0, slots, v.to(kv_buffer.dtype))
    return kv_buffer
