"""Multi-head latent attention whose decode rows read the latent pool in place (a C++ kernel).

The absorbed form of torch_native's `AbsorbedMLA` (each head's query moved onto the latent, the
value up-projection applied after attention); its decode rows are not gathered into a padded
`[Bd, L, R + r]` block for SDPA: the kernel walks each row's slot list in the pool, every head of
a row reading the same cached rows. Extend rows keep SDPA. Float32 pools only (the family's).
Decode steps can be captured: the static slot tables are the K/V kernel's, since both kernels
read a row's slots from the same unpadded list.
"""

from __future__ import annotations

import torch

from sglang.platforms.kernels.cpu_cpp.attention import PoolAttentionMetadata, PoolDecodeAttention
from sglang.platforms.kernels.cpu_cpp.build import ensure_built, kernel_ops
from sglang.platforms.kernels.torch_native.mla import AbsorbedMLA

ensure_built()


class PoolDecodeMLA(AbsorbedMLA):
    plan = PoolDecodeAttention.plan
    """Decode rows' slots unpadded, row after row (`pool_slots`, `pool_starts`); extend rows as SDPA's."""
    init_capture = PoolDecodeAttention.init_capture
    capture_metadata = PoolDecodeAttention.capture_metadata
    replay_metadata = PoolDecodeAttention.replay_metadata

    def _kernel_reads_pool(self) -> bool:
        """The latent kernel's pools: float32, under float32 queries."""
        return self.dtype == self.kv_dtype == torch.float32

    def _decode(self, query: torch.Tensor, kv_buffer: torch.Tensor, metadata: PoolAttentionMetadata, layer):
        scale, rank = layer.scale, self.kv_lora_rank
        return kernel_ops().mla_decode(query, kv_buffer, metadata.pool_slots, metadata.pool_starts, rank, scale)
