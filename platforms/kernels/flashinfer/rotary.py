"""Rotary embedding through `flashinfer.rope.apply_rope_with_cos_sin_cache`.

Its cache layout is ours (`[max_position, rotary_dim]` float32, `[cos | sin]`), rotary_dim may be
less than the head size, and it rotates `[T, heads * head_size]` views in place: the op returns
new tensors, so the inputs are copied first.
"""

from __future__ import annotations

import flashinfer
import torch


def apply_rotary(
    positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, cos_sin: torch.Tensor, is_neox: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    tokens, head_size = q.shape[0], q.shape[-1]
    query = q.reshape(tokens, -1).clone()
    key = k.reshape(tokens, -1).clone()
    flashinfer.rope.apply_rope_with_cos_sin_cache_inplace(
        positions=positions.to(torch.int64),
        query=query,
        key=key,
        head_size=head_size,
        cos_sin_cache=cos_sin.to(torch.float32),
        is_neox=is_neox,
    )
    return query.view(q.shape), key.view(k.shape)
