"""What one forward pass carries besides token ids and positions."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sglang.ops.attention import AttentionBackend, AttentionMetadata


@dataclass
class ForwardContext:
    """Attention state for one step.

    `kv_buffers[i]` is layer `i`'s KV buffer. Each attention layer replaces its entry with the
    buffer the attention op hands back, so after the forward the list holds the buffers to use
    next step (the same tensors on in-place platforms, new ones on functional platforms).
    """

    attn_backend: AttentionBackend
    attn_metadata: AttentionMetadata
    kv_buffers: list[torch.Tensor]
