"""The jax family's attention backend: ragged paged attention over a combined K/V page layout.

`plan` turns the runtime's token-level `AttentionInputs` into the ragged contract (see
`ragged_attention`): per-sequence KV lengths, page indices, cumulative query lengths and the
decodes-first distribution, as host arrays of a given padded `RaggedShape`. The tpu platform's
jitted step pads them to bucket shapes and passes them in as arguments; eager callers (op parity)
get them at their natural size. `forward` runs the jax.numpy kernel (which serves sinks), or on a
TPU the Pallas one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from sglang.ops.attention import AttentionBackend, AttentionInputs, AttentionLayer
from sglang.platforms.kernels.jax.interop import jax_op
from sglang.platforms.kernels.jax.ragged_attention import ragged_paged_attention

CONTRACT_FIELDS = ("kv_lens", "page_indices", "cu_q_lens", "distribution")


@dataclass(frozen=True)
class RaggedShape:
    """The static sizes a step's contract arrays are padded to (a jitted step's shape key)."""

    num_seqs: int
    pages_per_seq: int
    max_q_len: int

    @classmethod
    def natural(cls, inputs: AttentionInputs, page_size: int) -> RaggedShape:
        pages = max((-(-s // page_size) for s in inputs.seq_lens), default=1)
        return cls(max(len(inputs.seq_lens), 1), max(pages, 1), max(max(inputs.extend_lens, default=1), 1))


@dataclass(frozen=True)
class RaggedMetadata:
    """The contract arrays (torch tensors: host ones eagerly, torchax ones inside a jitted step)
    and the static `max_q_len`. It carries no host-side lengths, which a jitted step cannot see."""

    kv_lens: torch.Tensor
    page_indices: torch.Tensor
    cu_q_lens: torch.Tensor
    distribution: torch.Tensor
    max_q_len: int


def distribution(extend_lens: tuple[int, ...]) -> tuple[int, int, int]:
    """Cumulative (decodes, single-chunk prefills, all): the leading one-token sequences count
    as decodes; everything after them is counted as mixed, which every kernel handles."""
    decodes = next((i for i, e in enumerate(extend_lens) if e != 1), len(extend_lens))
    return decodes, decodes, len(extend_lens)


def pack_contract(inputs: AttentionInputs, page_size: int, shape: RaggedShape) -> dict[str, np.ndarray]:
    """The ragged contract of `inputs`, padded to `shape`. Padded sequences have no tokens and
    point at page 0 (the padding page)."""
    count = len(inputs.seq_lens)
    if count > shape.num_seqs or max(inputs.extend_lens, default=0) > shape.max_q_len:
        raise ValueError(f"{count} sequences with up to {max(inputs.extend_lens)} new tokens exceed {shape}")
    kv_lens = np.zeros(shape.num_seqs, np.int32)
    kv_lens[:count] = inputs.seq_lens
    cu_q_lens = np.full(shape.num_seqs + 1, sum(inputs.extend_lens), np.int32)
    cu_q_lens[: count + 1] = inputs.q_starts
    page_indices = np.zeros((shape.num_seqs, shape.pages_per_seq), np.int32)
    slots = inputs.kv_slots.numpy()
    starts = inputs.kv_starts
    for i in range(count):
        pages = slots[starts[i] : starts[i + 1] : page_size] // page_size
        if len(pages) > shape.pages_per_seq:
            raise ValueError(f"sequence {i} holds {len(pages)} pages, more than {shape.pages_per_seq}")
        page_indices[i, : len(pages)] = pages
    spread = np.asarray(distribution(inputs.extend_lens), np.int32)
    return {"kv_lens": kv_lens, "page_indices": page_indices, "cu_q_lens": cu_q_lens, "distribution": spread}


class RaggedPagedAttention(AttentionBackend):
    """KV buffer per layer: `[num_pages, page_size, 2 * Hk, D]`, keys at even combined heads."""

    kernel = staticmethod(jax_op(ragged_paged_attention))

    def kv_buffer_shape(self, num_slots: int) -> tuple[int, ...]:
        if num_slots % self.page_size:
            raise ValueError(f"{num_slots} slots are not whole pages of {self.page_size}")
        return (num_slots // self.page_size, self.page_size, 2 * self.num_kv_heads, self.head_dim)

    def kv_bytes_per_token(self) -> int:
        return 2 * self.num_kv_heads * self.head_dim * self.kv_dtype.itemsize

    def kv_to_tokens(self, block: torch.Tensor, slot_axis: int) -> torch.Tensor:
        """Per token `[1, 2 * Hk, D]` with K and V interleaved by head becomes `[2, Hk, D]`."""
        tokens = super().kv_to_tokens(block, slot_axis)
        layers, n = tokens.shape[:2]
        return tokens.reshape(layers, n, self.num_kv_heads, 2, self.head_dim).transpose(2, 3)

    def kv_from_tokens(self, tokens: torch.Tensor, slot_axis: int) -> torch.Tensor:
        layers, n = tokens.shape[:2]
        interleaved = tokens.transpose(2, 3).reshape(layers, n, 1, 2 * self.num_kv_heads, self.head_dim)
        return super().kv_from_tokens(interleaved, slot_axis)

    def plan(self, inputs: AttentionInputs) -> RaggedMetadata:  # type: ignore[override]
        shape = RaggedShape.natural(inputs, self.page_size)
        arrays = pack_contract(inputs, self.page_size, shape)
        return self.metadata({k: torch.from_numpy(v) for k, v in arrays.items()}, shape.max_q_len)

    @staticmethod
    def metadata(arrays: dict[str, torch.Tensor], max_q_len: int) -> RaggedMetadata:
        return RaggedMetadata(**{k: arrays[k] for k in CONTRACT_FIELDS}, max_q_len=max_q_len)

    def forward(self, q, k, v, kv_buffer, metadata: RaggedMetadata, layer: AttentionLayer, sinks=None):  # type: ignore[override]
        # Only layers with sinks pass them: the Pallas kernel this class also drives takes none.
        with_sinks = {} if sinks is None else {"sinks": sinks}
        return self.kernel(
            q,
            k,
            v,
            kv_buffer,
            metadata.kv_lens,
            metadata.page_indices,
            metadata.cu_q_lens,
            metadata.distribution,
            sm_scale=layer.scale,
            max_q_len=metadata.max_q_len,
            sliding_window=layer.sliding_window,
            soft_cap=layer.logit_softcap,
            **with_sinks,
        )
