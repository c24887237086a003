"""Paged attention whose decode rows read the KV pool in place (a C++ kernel), for host tensors.

Decode rows are not gathered into a padded `[B, Hk, Lmax, D]` block: the kernel walks each row's
slot list in the pool itself, so a step reads each cached K/V once (the gather read it, wrote a
copy, and SDPA read the copy again; at ~1000-token contexts that copy dominated decode). The
kernel serves a sliding window (it reads only the window's slots), logit soft-capping and
attention sinks (gpt-oss). Float32 queries over a float32 or bfloat16 pool (`--kv-cache-dtype
bf16`: each K/V row widened as it is read, half the bytes a step streams from the pool).

Short extend rows after a cached prefix (a question after a few-shot prefix found in the cache,
at most `POOL_EXTEND_MAX_TOKENS` new tokens) go to the same kernel, one kernel row per new token
whose slots are the prefix and the new tokens up to itself (the new K/V rows are stored before
any row attends, so this is the causal mask). One kernel call then serves every such row of the
step, where SDPA took one masked call per row (a gathered copy of the prefix and a mask each:
~2.5x the kernel's time at 18 new tokens over 900 cached ones). Other extend rows (prefills
from scratch, long chunks) are SDPA's, as in torch_native.
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
    kernel_only: bool = False
    """Every query row is a kernel row, in packed order (decided when planning: a traced step
    cannot compare shapes)."""


POOL_EXTEND_MAX_TOKENS = 64
"""Extend rows with a cached prefix and at most this many new tokens run in the kernel. Its slot
lists grow with rows x context (one list per new token), so long extends stay with SDPA."""


KERNEL_POOL_DTYPES = (torch.float32, torch.bfloat16)
"""The pools the kernel reads, under float32 queries."""


class PoolDecodeAttention(SdpaAttention):
    def _kernel_reads_pool(self) -> bool:
        """Whether this model's queries and pool are the kernel's (else every row is SDPA's)."""
        return self.dtype == torch.float32 and self.kv_dtype in KERNEL_POOL_DTYPES

    def plan(self, inputs: AttentionInputs) -> PoolAttentionMetadata:
        lens, prefixes = inputs.extend_lens, inputs.prefix_lens
        short = self._kernel_reads_pool()  # else extends stay with SDPA
        in_kernel = [e == 1 or (short and 1 < e <= POOL_EXTEND_MAX_TOKENS and p > 0) for e, p in zip(lens, prefixes)]
        pooled = [i for i, kernel in enumerate(in_kernel) if kernel]
        extend = tuple(i for i, e in enumerate(lens) if e > 1 and not in_kernel[i])
        meta = PoolAttentionMetadata(inputs=inputs, new_slots=inputs.new_slots(), extend_rows=extend)
        if not pooled:
            return meta
        meta.kernel_only = not extend and sum(lens[i] for i in pooled) == sum(lens)
        kv_starts, q_starts = inputs.kv_starts, inputs.q_starts
        if pooled == list(range(len(pooled))) and all(lens[i] == 1 for i in pooled):
            # decodes first, as the scheduler packs them: the slot lists are the step's own
            meta.pool_slots = inputs.kv_slots[: kv_starts[len(pooled)]]
            meta.pool_starts = torch.tensor(kv_starts[: len(pooled) + 1], dtype=torch.long)
            meta.decode_rows = meta.decode_q_index = torch.arange(len(pooled))
            return meta
        # One kernel row per new token: the j-th new token of a row sees its first
        # `prefix + j + 1` slots. Gathered in one index: token t's list starts at its row's first slot.
        seen = [prefixes[i] + j + 1 for i in pooled for j in range(lens[i])]
        first = [kv_starts[i] for i in pooled for _ in range(lens[i])]
        seen_t = torch.tensor(seen, dtype=torch.long)
        starts = torch.zeros(len(seen) + 1, dtype=torch.long)
        torch.cumsum(seen_t, 0, out=starts[1:])
        offsets = torch.repeat_interleave(torch.tensor(first, dtype=torch.long) - starts[:-1], seen_t)
        meta.pool_slots = inputs.kv_slots[torch.arange(int(starts[-1])) + offsets]
        meta.pool_starts = starts
        meta.decode_rows = torch.tensor(pooled)
        meta.decode_q_index = torch.tensor([q for i in pooled for q in range(q_starts[i], q_starts[i + 1])])
        return meta

    # Static decode metadata for captured (compiled) steps: one set of buffers, sized for the
    # largest bucket; a bucket's metadata views their first rows. The kernel reads slots only up
    # to `pool_starts[-1]`, so the slot buffer never needs trimming.

    def init_capture(self, limits: CaptureLimits) -> str | None:
        # A captured step has no per-step plan, so every layer must take the kernel's path.
        if not self._kernel_reads_pool():
            return f"{type(self).__name__} captures float32 models only, not {self.dtype} (pool {self.kv_dtype})"
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
            kernel_only=True,
        )

    def replay_metadata(self, batch: int, inputs: AttentionInputs) -> None:
        starts = torch.tensor(inputs.kv_starts, dtype=torch.long)
        self._slots[: inputs.kv_slots.numel()].copy_(inputs.kv_slots)
        self._starts[: batch + 1].copy_(starts)
        self._new_slots[:batch].copy_(inputs.kv_slots[starts[1:] - 1])

    def forward(self, q, k, v, kv_buffer, metadata, layer, sinks=None):
        if metadata.pool_slots is not None and not self._reads_pool(q, kv_buffer, metadata):
            return super().forward(q, k, v, kv_buffer, self._padded(metadata), layer, sinks)
        if metadata.kernel_only:
            # Every query row is a kernel row, in order; the kernel stores the new K/V rows itself
            # (two index copies fewer per layer).
            pool = (metadata.new_slots, metadata.pool_slots, metadata.pool_starts)
            return kernel_ops().decode_attention_store(q, k, v, kv_buffer, *pool, *_layer_args(layer, sinks)), kv_buffer
        return super().forward(q, k, v, kv_buffer, metadata, layer, sinks)

    def _decode(self, q, kv_buffer, meta, layer, sinks=None) -> torch.Tensor:
        queries = q[meta.decode_q_index]
        pool = (meta.pool_slots, meta.pool_starts)
        return kernel_ops().decode_attention(queries, kv_buffer, *pool, *_layer_args(layer, sinks))

    def _reads_pool(self, q, kv_buffer, meta: PoolAttentionMetadata) -> bool:
        """Whether the kernel serves this step's decode rows (else the SDPA path does)."""
        return meta.pool_slots is not None and q.dtype == torch.float32 and kv_buffer.dtype in KERNEL_POOL_DTYPES

    def _padded(self, meta: PoolAttentionMetadata) -> SdpaAttentionMetadata:
        """The torch_native metadata for the same batch (decode rows gathered, then SDPA; every
        extend row SDPA's)."""
        return SdpaAttention.plan(self, meta.inputs)


def _layer_args(layer: AttentionLayer, sinks: torch.Tensor | None) -> tuple:
    """The kernel's per-layer arguments: scale, window (0: none), soft-cap (0: none), sinks."""
    return layer.scale, layer.sliding_window or 0, layer.logit_softcap or 0.0, sinks
