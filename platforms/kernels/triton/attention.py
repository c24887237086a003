"""The Triton attention backend: planning a step's metadata and launching the kernels.

`plan` turns the token-level contract (`seq_lens`, `extend_lens`, `kv_slots`) into device
tensors once per step; every layer's `forward` reuses them and launches without reading
anything back to the host. Graph capture of decode buckets hands out views of static buffers
(`capture_metadata`) that `replay_metadata` refills in place: a decode bucket's work lists are
shape-static (one decode row per sequence, no extend block), so only their contents change.
Sequences with one new token go to the split-KV decode kernel, the others to the extend
kernel (decodes may sit anywhere in the batch); sequences with no new token are skipped.
The KV buffer keeps the reference layout `[2, num_slots, Hk, D]`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import triton

from sglang.ops.attention import AttentionBackend, AttentionInputs, AttentionLayer, AttentionMetadata, CaptureLimits
from sglang.platforms.kernels.triton.decode_attention import decode_merge_kernel, decode_split_kernel
from sglang.platforms.kernels.triton.extend_attention import extend_kernel
from sglang.platforms.kernels.triton.kv_store import store_kv
from sglang.platforms.kernels.triton.tuning import TritonTuning, resolve

MIN_DOT = 16
"""GPUs reject `tl.dot` operands with a dimension under 16."""


def _ints(values: list[int] | tuple[int, ...]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int32)


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
        self,
        num_heads: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device,
        *,
        tuning: TritonTuning | None = None,
    ) -> None:
        super().__init__(num_heads, num_kv_heads, head_dim, dtype, device)
        self.tuning = resolve(tuning)
        self.group = num_heads // num_kv_heads
        self.block_d = max(MIN_DOT, triton.next_power_of_2(head_dim))
        self._static: dict[str, torch.Tensor] = {}
        """Capture buffers (`init_capture`): every bucket's metadata is a view of them."""

    def _host_tables(self, inputs: AttentionInputs) -> dict[str, torch.Tensor]:
        """The metadata's index tensors, built on the host (scratch excluded)."""
        decode = [i for i, e in enumerate(inputs.extend_lens) if e == 1]
        block_m = self.tuning.extend_block_m
        blocks = [(i, row) for i, e in enumerate(inputs.extend_lens) if e > 1 for row in range(0, e, block_m)]
        return {
            "new_slots": inputs.new_slots().long(),
            "kv_slots": inputs.kv_slots.long(),
            "q_start": _ints(inputs.q_starts[:-1]),
            "extend_len": _ints(inputs.extend_lens),
            "kv_start": _ints(inputs.kv_starts[:-1]),
            "seq_len": _ints(inputs.seq_lens),
            "decode_seqs": _ints(decode),
            "block_seq": _ints([seq for seq, _ in blocks]),
            "block_row": _ints([row for _, row in blocks]),
        }

    def _scratch(self, rows: int) -> dict[str, torch.Tensor]:
        splits = self.tuning.decode_kv_splits
        options = dict(dtype=torch.float32, device=self.device)
        return {
            "partial_out": torch.empty(rows, self.num_heads, splits, self.head_dim, **options),
            "partial_lse": torch.empty(rows, self.num_heads, splits, **options),
        }

    def plan(self, inputs: AttentionInputs) -> TritonAttentionMetadata:
        tables = {name: t.to(self.device) for name, t in self._host_tables(inputs).items()}
        return TritonAttentionMetadata(inputs=inputs, **tables, **self._scratch(len(tables["decode_seqs"])))

    def init_capture(self, limits: CaptureLimits) -> str | None:
        rows = limits.max_batch
        ints = dict(dtype=torch.int32, device=self.device)
        self._static = {
            "new_slots": torch.zeros(rows, dtype=torch.int64, device=self.device),
            "kv_slots": torch.zeros(limits.max_kv_entries, dtype=torch.int64, device=self.device),
            **{name: torch.zeros(rows, **ints) for name in ("q_start", "extend_len", "kv_start", "seq_len")},
            "decode_seqs": torch.arange(rows, **ints),
            "block_seq": torch.zeros(0, **ints),
            "block_row": torch.zeros(0, **ints),
            **self._scratch(rows),
        }
        return None

    def capture_metadata(self, batch: int) -> TritonAttentionMetadata:
        """Views of the static buffers for `batch` decode rows; `kv_slots` is the whole buffer
        (kernels read it only through `kv_start` and `seq_len`)."""
        views = {
            name: t if name in ("kv_slots", "block_seq", "block_row") else t[:batch] for name, t in self._static.items()
        }
        padding = AttentionInputs(
            seq_lens=(1,) * batch, extend_lens=(1,) * batch, kv_slots=torch.zeros(batch, dtype=torch.int64)
        )
        return TritonAttentionMetadata(inputs=padding, **views)

    def replay_metadata(self, batch: int, inputs: AttentionInputs) -> None:
        if len(inputs.seq_lens) != batch or not inputs.is_decode:
            raise ValueError(f"a captured bucket of {batch} replays only {batch} decode rows")
        for name, table in self._host_tables(inputs).items():
            self._static[name][: table.numel()].copy_(table)

    def forward(self, q, k, v, kv_buffer, metadata: TritonAttentionMetadata, layer: AttentionLayer, sinks=None):
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
        # Kernels without sinks get `out` as a placeholder pointer they never read.
        sink_logits = out if sinks is None else sinks
        if metadata.decode_seqs.numel():
            self._decode(q, out, kv_buffer, metadata, common, flags, cache_strides, sink_logits, sinks is not None)
        if metadata.block_seq.numel():
            extend_kernel[(metadata.block_seq.numel(), self.num_heads)](
                q,
                out,
                kv_buffer,
                sink_logits,
                metadata.kv_slots,
                metadata.q_start,
                metadata.extend_len,
                metadata.kv_start,
                metadata.seq_len,
                metadata.block_seq,
                metadata.block_row,
                **common,
                stride_qt=q.stride(0),
                stride_qh=q.stride(1),
                stride_ot=out.stride(0),
                stride_oh=out.stride(1),
                stride_cache_kv=cache_strides[0],
                stride_cache_slot=cache_strides[1],
                stride_cache_h=cache_strides[2],
                **flags,
                HAS_SINKS=sinks is not None,
                BLOCK_M=self.tuning.extend_block_m,
                BLOCK_D=self.block_d,
                BLOCK_N=self.tuning.extend_block_n,
                **self.tuning.launch_options(),
            )
        return out, kv_buffer

    def _decode(
        self, q, out, kv_buffer, meta: TritonAttentionMetadata, common, flags, cache_strides, sinks, has_sinks: bool
    ) -> None:
        rows = meta.decode_seqs.numel()
        splits = self.tuning.decode_kv_splits
        po, pl = meta.partial_out, meta.partial_lse
        block_g = max(MIN_DOT, triton.next_power_of_2(self.group))
        partial_strides = dict(
            stride_po_row=po.stride(0),
            stride_po_h=po.stride(1),
            stride_po_split=po.stride(2),
            stride_pl_row=pl.stride(0),
            stride_pl_h=pl.stride(1),
        )
        decode_split_kernel[(rows, self.num_kv_heads, splits)](
            q,
            kv_buffer,
            meta.kv_slots,
            meta.q_start,
            meta.kv_start,
            meta.seq_len,
            meta.decode_seqs,
            po,
            pl,
            **common,
            stride_qt=q.stride(0),
            stride_qh=q.stride(1),
            stride_cache_kv=cache_strides[0],
            stride_cache_slot=cache_strides[1],
            stride_cache_h=cache_strides[2],
            **partial_strides,
            **flags,
            NUM_SPLITS=splits,
            BLOCK_G=block_g,
            BLOCK_D=self.block_d,
            BLOCK_N=self.tuning.decode_block_n,
            **self.tuning.launch_options(),
        )
        decode_merge_kernel[(rows, self.num_kv_heads)](
            po,
            pl,
            out,
            sinks,
            meta.q_start,
            meta.seq_len,
            meta.decode_seqs,
            common["window"],
            self.group,
            self.head_dim,
            **partial_strides,
            stride_ot=out.stride(0),
            stride_oh=out.stride(1),
            HAS_WINDOW=flags["HAS_WINDOW"],
            HAS_SINKS=has_sinks,
            NUM_SPLITS=splits,
            BLOCK_G=block_g,
            BLOCK_D=self.block_d,
            BLOCK_N=self.tuning.decode_block_n,
            **self.tuning.launch_options(),
        )
