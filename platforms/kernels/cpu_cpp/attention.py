"""Paged attention whose decode rows read the KV pool in place (a C++ kernel), for host tensors.

Extend rows (prefill) are SDPA's, as in torch_native. Decode rows are not gathered into a padded
`[B, Hk, Lmax, D]` block: the kernel walks each row's slot list in the pool itself, so a step
reads each cached K/V once (the gather read it, wrote a copy, and SDPA read the copy again;
at ~1000-token contexts that copy dominated decode). The kernel serves a sliding window (it reads
only the window's slots), logit soft-capping and attention sinks (gpt-oss). Float32 pools only.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sglang.ops.attention import AttentionInputs, AttentionLayer, CaptureLimits
from sglang.platforms.kernels.cpu_cpp.build import ensure_built, kernel_ops
from sglang.platforms.kernels.torch_native.attention import SdpaAttention, SdpaAttentionMetadata

ensure_built()


@dataclass
class PoolAttentionMetadata(SdpaAttentionMetadata):
    pool_slots: torch.Tensor | None = None
    """The decode rows' cache slots, row after row (unpadded)."""
    pool_starts: torch.Tensor | None = None
    """`[Bd + 1]`: where each decode row's slots begin in `pool_slots`."""


class PoolDecodeAttention(SdpaAttention):
    def plan(self, inputs: AttentionInputs) -> PoolAttentionMetadata:
        decode = [i for i, e in enumerate(inputs.extend_lens) if e == 1]
        extend = tuple(i for i, e in enumerate(inputs.extend_lens) if e > 1)
        meta = PoolAttentionMetadata(inputs=inputs, new_slots=inputs.new_slots(), extend_rows=extend)
        if decode:
            kv_starts, q_starts = inputs.kv_starts, inputs.q_starts
            if decode == list(range(len(decode))):  # decodes first, as the scheduler packs them
                meta.pool_slots = inputs.kv_slots[: kv_starts[len(decode)]]
                starts = kv_starts[: len(decode) + 1]
            else:
                meta.pool_slots = torch.cat([inputs.kv_slots[kv_starts[i] : kv_starts[i + 1]] for i in decode])
                starts = (0, *torch.tensor([inputs.seq_lens[i] for i in decode]).cumsum(0).tolist())
            meta.pool_starts = torch.tensor(starts, dtype=torch.long)
            meta.decode_rows = torch.tensor(decode)
            meta.decode_q_index = torch.tensor([q_starts[i] for i in decode])
        return meta

    # Static decode metadata for captured (compiled) steps: one set of buffers, sized for the
    # largest bucket; a bucket's metadata views their first rows. The kernel reads slots only up
    # to `pool_starts[-1]`, so the slot buffer never needs trimming.

    def init_capture(self, limits: CaptureLimits) -> str | None:
        # A captured step has no per-step plan, so every layer must take the kernel's path.
        if self.dtype != torch.float32:
            return f"{type(self).__name__} captures float32 KV pools only, not {self.dtype}"
        self._slots = torch.zeros(limits.max_kv_entries, dtype=torch.long)
        self._starts = torch.zeros(limits.max_batch + 1, dtype=torch.long)
        self._new_slots = torch.zeros(limits.max_batch, dtype=torch.long)
        self._q_index = torch.arange(limits.max_batch)
        return None

    def capture_metadata(self, batch: int) -> PoolAttentionMetadata:
        # `inputs` is read only for extend rows, which a decode bucket has none of: one placeholder
        # for every bucket keeps per-bucket constants (its lengths) out of the compiled step.
        rows = AttentionInputs((1,), (1,), self._slots[:1])
        return PoolAttentionMetadata(
            inputs=rows,
            new_slots=self._new_slots[:batch],
            decode_rows=self._q_index[:batch],
            decode_q_index=self._q_index[:batch],
            pool_slots=self._slots,
            pool_starts=self._starts[: batch + 1],
        )

    def replay_metadata(self, batch: int, inputs: AttentionInputs) -> None:
        starts = torch.tensor(inputs.kv_starts, dtype=torch.long)
        self._slots[: inputs.kv_slots.numel()].copy_(inputs.kv_slots)
        self._starts[: batch + 1].copy_(starts)
        self._new_slots[:batch].copy_(inputs.kv_slots[starts[1:] - 1])

    def forward(self, q, k, v, kv_buffer, metadata, layer, sinks=None):
        if not metadata.extend_rows and self._reads_pool(q, kv_buffer, metadata):
            # A decode-only step: every query row is a decode row, in order; the kernel stores the
            # new K/V rows itself (two index copies fewer per layer).
            pool = (metadata.new_slots, metadata.pool_slots, metadata.pool_starts)
            return kernel_ops().decode_attention_store(q, k, v, kv_buffer, *pool, *_layer_args(layer, sinks)), kv_buffer
        return super().forward(q, k, v, kv_buffer, metadata, layer, sinks)

    def _decode(self, q, kv_buffer, meta, layer, sinks=None) -> torch.Tensor:
        if not self._reads_pool(q, kv_buffer, meta):
            return super()._decode(q, kv_buffer, self._padded(meta), layer, sinks)
        queries = q[meta.decode_q_index]
        pool = (meta.pool_slots, meta.pool_starts)
        return kernel_ops().decode_attention(queries, kv_buffer, *pool, *_layer_args(layer, sinks))

    def _reads_pool(self, q, kv_buffer, meta: PoolAttentionMetadata) -> bool:
        """Whether the kernel serves this step's decode rows (else the SDPA path does)."""
        return meta.pool_slots is not None and q.dtype == kv_buffer.dtype == torch.float32

    def _padded(self, meta: PoolAttentionMetadata) -> SdpaAttentionMetadata:
        """The torch_native metadata for the same batch (its decode path: gather, then SDPA)."""
        return SdpaAttention.plan(self, meta.inputs)


def _layer_args(layer: AttentionLayer, sinks: torch.Tensor | None) -> tuple:
    """The kernel's per-layer arguments: scale, window (0: none), soft-cap (0: none), sinks."""
    return layer.scale, layer.sliding_window or 0, layer.logit_softcap or 0.0, sinks
