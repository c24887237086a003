"""The Triton attention backend: planning a step's metadata and launching the kernels.

`plan` turns the token-level contract (`seq_lens`, `extend_lens`, `kv_slots`) into device
tensors once per step; every layer's `forward` reuses them and launches without reading
anything back to the host, so a later graph capture can refill the same tensors in place.
Sequences with one new token go to the split-KV decode kernel, the others to the extend
kernel (decodes may sit anywhere in the batch); sequences with no new token are skipped.
The KV buffer keeps the reference layout `[2, num_slots, Hk, D]`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import triton

from sglang.ops.attention import AttentionBackend, AttentionInputs, AttentionLayer, AttentionMetadata
from sglang.platforms.kernels.triton.decode_attention import decode_merge_kernel, decode_split_kernel
from sglang.platforms.kernels.triton.extend_attention import extend_kernel
from sglang.platforms.kernels.triton.kv_store import store_kv
from sglang.platforms.kernels.triton.tuning import TritonTuning, resolve

MIN_DOT = 16
"""GPUs reject `tl.dot` operands with a dimension under 16."""


def _device_ints(values: list[int], device: torch.device) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int32).to(device)


@dataclass
class TritonAttentionMetadata(AttentionMetadata):
    """Per-sequence tensors `[B]` (int32, device) and the two kernels' work lists."""

    kv_slots: torch.Tensor = field(repr=False)
    """`[sum(seq_lens)]` int64: every token's cache slot, sequence after sequence."""
    q_start: torch.Tensor = field(repr=False)
    """Packed index of each sequence's first new token."""
    extend_len: torch.Tensor = field(repr=False)
    kv_start: torch.Tensor = field(repr=False)
    """Offset of each sequence's first slot in `kv_slots`."""
    seq_len: torch.Tensor = field(repr=False)
    decode_seqs: torch.Tensor = field(repr=False)
    """`[Bd]`: the sequences with exactly one new token."""
    partial_out: torch.Tensor = field(repr=False)
    """`[Bd, Hq, splits, D]` float32 decode scratch, shared by every layer of the step."""
    partial_lse: torch.Tensor = field(repr=False)
    """`[Bd, Hq, splits]` float32 decode scratch."""
    block_seq: torch.Tensor = field(repr=False)
    """`[Nb]`: the sequence of each extend query block."""
    block_row: torch.Tensor = field(repr=False)
    """`[Nb]`: the block's first new-token index within its sequence."""


class TritonAttention(AttentionBackend):
    """Paged decode (split-KV) and extend attention; sliding window and logit soft-cap in-kernel."""

    def __init__(
        self, num_heads: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype, device: torch.device,
        *, tuning: TritonTuning | None = None,
    ) -> None:
        super().__init__(num_heads, num_kv_heads, head_dim, dtype, device)
        self.tuning = resolve(tuning)
        self.group = num_heads // num_kv_heads
        self.block_d = max(MIN_DOT, triton.next_power_of_2(head_dim))

    def plan(self, inputs: AttentionInputs) -> TritonAttentionMetadata:
        block_m = self.tuning.extend_block_m
        decode = [i for i, e in enumerate(inputs.extend_lens) if e == 1]
        blocks = [(i, row) for i, e in enumerate(inputs.extend_lens) if e > 1 for row in range(0, e, block_m)]
        splits = self.tuning.decode_kv_splits
        dev = self.device
        scratch = dict(dtype=torch.float32, device=dev)
        return TritonAttentionMetadata(
            inputs=inputs,
            new_slots=inputs.new_slots().to(dev),
            kv_slots=inputs.kv_slots.to(dev, torch.int64),
            q_start=_device_ints(list(inputs.q_starts[:-1]), dev),
            extend_len=_device_ints(list(inputs.extend_lens), dev),
            kv_start=_device_ints(list(inputs.kv_starts[:-1]), dev),
            seq_len=_device_ints(list(inputs.seq_lens), dev),
            decode_seqs=_device_ints(decode, dev),
            partial_out=torch.empty(len(decode), self.num_heads, splits, self.head_dim, **scratch),
            partial_lse=torch.empty(len(decode), self.num_heads, splits, **scratch),
            block_seq=_device_ints([seq for seq, _ in blocks], dev),
            block_row=_device_ints([row for _, row in blocks], dev),
        )

    def forward(self, q, k, v, kv_buffer, metadata: TritonAttentionMetadata, layer: AttentionLayer):
        kv_buffer = store_kv(kv_buffer, metadata.new_slots, k, v, tuning=self.tuning)
        q = q if q.stride(-1) == 1 else q.contiguous()
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        common = dict(
            scale=layer.scale,
            softcap=layer.logit_softcap or 1.0,
            window=layer.sliding_window or 0,
            group=self.group,
            head_dim=self.head_dim,
        )
        flags = dict(HAS_WINDOW=layer.sliding_window is not None, HAS_SOFTCAP=layer.logit_softcap is not None)
        cache_strides = (kv_buffer.stride(0), kv_buffer.stride(1), kv_buffer.stride(2))
        if metadata.decode_seqs.numel():
            self._decode(q, out, kv_buffer, metadata, common, flags, cache_strides)
        if metadata.block_seq.numel():
            extend_kernel[(metadata.block_seq.numel(), self.num_heads)](
                q, out, kv_buffer, metadata.kv_slots, metadata.q_start, metadata.extend_len, metadata.kv_start,
                metadata.seq_len, metadata.block_seq, metadata.block_row, **common,
                stride_qt=q.stride(0), stride_qh=q.stride(1), stride_ot=out.stride(0), stride_oh=out.stride(1),
                stride_cache_kv=cache_strides[0], stride_cache_slot=cache_strides[1], stride_cache_h=cache_strides[2],
                **flags, BLOCK_M=self.tuning.extend_block_m, BLOCK_D=self.block_d, BLOCK_N=self.tuning.extend_block_n,
                **self.tuning.launch_options(),
            )
        return out, kv_buffer

    def _decode(self, q, out, kv_buffer, meta: TritonAttentionMetadata, common, flags, cache_strides) -> None:
        rows = meta.decode_seqs.numel()
        splits = self.tuning.decode_kv_splits
        po, pl = meta.partial_out, meta.partial_lse
        block_g = max(MIN_DOT, triton.next_power_of_2(self.group))
        partial_strides = dict(
            stride_po_row=po.stride(0), stride_po_h=po.stride(1), stride_po_split=po.stride(2),
            stride_pl_row=pl.stride(0), stride_pl_h=pl.stride(1),
        )
        decode_split_kernel[(rows, self.num_kv_heads, splits)](
            q, kv_buffer, meta.kv_slots, meta.q_start, meta.kv_start, meta.seq_len, meta.decode_seqs, po, pl,
            **common, stride_qt=q.stride(0), stride_qh=q.stride(1),
            stride_cache_kv=cache_strides[0], stride_cache_slot=cache_strides[1], stride_cache_h=cache_strides[2],
            **partial_strides, **flags, NUM_SPLITS=splits,
            BLOCK_G=block_g, BLOCK_D=self.block_d,
            BLOCK_N=self.tuning.decode_block_n, **self.tuning.launch_options(),
        )
        decode_merge_kernel[(rows, self.num_kv_heads)](
            po, pl, out, meta.q_start, meta.seq_len, meta.decode_seqs, common["window"], self.group, self.head_dim,
            **partial_strides, stride_ot=out.stride(0), stride_oh=out.stride(1),
            HAS_WINDOW=flags["HAS_WINDOW"], NUM_SPLITS=splits, BLOCK_G=block_g, BLOCK_D=self.block_d,
            BLOCK_N=self.tuning.decode_block_n, **self.tuning.launch_options(),
        )
