"""Multi-head latent attention whose decode rows run a Triton kernel over the latent pool in place.

The absorbed form of torch_native's `AbsorbedMLA` (each head's query moved onto the latent and
joined with its rotary part, the value up-projection applied after attention); extend rows keep
its SDPA path. A decode program takes one row and a block of `BLOCK_H >= 16` heads (every head
reads the same cached `[c | k_pe]` rows: one KV head), walks the row's slot list in blocks of
`BLOCK_N` tokens with an online softmax, and accumulates the attended latent (the rows' first `R`
columns). Scores are two dots, latent and rotary part, so neither width needs padding to the
other's. Dots take operands in the pool's dtype with float32 accumulation (`jit_math`'s rule).
Unlike the K/V decode kernel there is no split-KV: one program reads a row's whole context.

Graph capture of decode buckets: the decode metadata are views of static buffers, sized for the
largest bucket, that `replay_metadata` refills in place (a decode bucket has no extend row, so
SDPA's host-side extend loop never runs in a captured step).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from sglang.ops.attention import AttentionInputs, CaptureLimits
from sglang.platforms.kernels.torch_native.attention import SdpaAttentionMetadata
from sglang.platforms.kernels.torch_native.mla import AbsorbedMLA
from sglang.platforms.kernels.triton.tuning import TritonTuning, resolve

MIN_DOT = 16
"""GPUs reject `tl.dot` operands with a dimension under 16."""


@triton.jit
def mla_decode_kernel(
    Query,
    Cache,
    KvSlots,
    KvStart,
    SeqLen,
    Out,
    scale,
    num_heads,
    rank,
    rope,
    stride_qb,
    stride_qh,
    stride_cache,
    stride_ob,
    stride_oh,
    BLOCK_H: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_PE: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """Program (decode row, head block): `Out[row, h] = sum_j softmax_j(scale * Query[row, h] .
    Cache[slot_j]) * Cache[slot_j, :rank]` over the row's slots `KvSlots[KvStart[row] + j]`,
    `j < SeqLen[row]`. Only those slots are read (a free slot may hold NaN)."""
    row = tl.program_id(0)
    heads = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    h_mask = heads < num_heads
    r = tl.arange(0, BLOCK_R)
    e = tl.arange(0, BLOCK_PE)
    r_mask = r < rank
    e_mask = e < rope
    q_rows = Query + row * stride_qb + heads[:, None] * stride_qh
    q_lat = tl.load(q_rows + r[None, :], mask=h_mask[:, None] & r_mask[None, :], other=0.0)
    q_pe = tl.load(q_rows + rank + e[None, :], mask=h_mask[:, None] & e_mask[None, :], other=0.0)
    kv_start = tl.load(KvStart + row).to(tl.int64)
    seq_len = tl.load(SeqLen + row)
    m = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
    denom = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_R], dtype=tl.float32)
    for start in range(0, seq_len, BLOCK_N):
        n = start + tl.arange(0, BLOCK_N)
        n_mask = n < seq_len
        slots = tl.load(KvSlots + kv_start + n, mask=n_mask, other=0).to(tl.int64)
        rows = Cache + slots[:, None] * stride_cache
        k_lat = tl.load(rows + r[None, :], mask=n_mask[:, None] & r_mask[None, :], other=0.0)
        k_pe = tl.load(rows + rank + e[None, :], mask=n_mask[:, None] & e_mask[None, :], other=0.0)
        scores = tl.dot(q_lat, tl.trans(k_lat), input_precision="ieee")
        scores += tl.dot(q_pe, tl.trans(k_pe), input_precision="ieee")
        scores = tl.where(n_mask[None, :], scores * scale, float("-inf"))
        # Every iteration has a visible token, so m_new is finite.
        m_new = tl.maximum(m, tl.max(scores, axis=1))
        alpha = tl.exp(m - m_new)
        p = tl.exp(scores - m_new[:, None])
        denom = denom * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(k_lat.dtype), k_lat, input_precision="ieee")
        m = m_new
    out = Out + row * stride_ob + heads[:, None] * stride_oh + r[None, :]
    tl.store(out, acc / denom[:, None], mask=h_mask[:, None] & r_mask[None, :])


@dataclass
class TritonMLAMetadata(SdpaAttentionMetadata):
    kv_slots: torch.Tensor | None = None
    """Every token's cache slot, sequence after sequence (the contract's `kv_slots`, on the device)."""
    decode_kv_start: torch.Tensor | None = None
    """`[Bd]` int32: where each decode row's slots begin in `kv_slots`."""
    decode_len: torch.Tensor | None = None
    """`[Bd]` int32: each decode row's tokens in the cache."""


class TritonMLA(AbsorbedMLA):
    def __init__(
        self,
        num_heads: int,
        kv_lora_rank: int,
        qk_rope_head_dim: int,
        dtype: torch.dtype,
        device: torch.device,
        *,
        tuning: TritonTuning | None = None,
    ) -> None:
        super().__init__(num_heads, kv_lora_rank, qk_rope_head_dim, dtype, device)
        self.tuning = resolve(tuning)
        self._static: dict[str, torch.Tensor] = {}
        """Capture buffers (`init_capture`): every bucket's metadata is a view of them."""

    def plan(self, inputs: AttentionInputs) -> TritonMLAMetadata:
        decode = [i for i, e in enumerate(inputs.extend_lens) if e == 1]
        extend = tuple(i for i, e in enumerate(inputs.extend_lens) if e > 1)
        meta = TritonMLAMetadata(inputs=inputs, new_slots=inputs.new_slots(), extend_rows=extend)
        if decode:
            meta.kv_slots = inputs.kv_slots.to(self.device)
            meta.decode_rows = torch.tensor(decode)
            meta.decode_q_index = torch.tensor([inputs.q_starts[i] for i in decode])
            as_device = {"dtype": torch.int32, "device": self.device}
            meta.decode_kv_start = torch.tensor([inputs.kv_starts[i] for i in decode], **as_device)
            meta.decode_len = torch.tensor([inputs.seq_lens[i] for i in decode], **as_device)
        return meta

    def _decode(self, query: torch.Tensor, kv_buffer: torch.Tensor, metadata: TritonMLAMetadata, layer):
        query = query.contiguous()
        rows, heads = query.shape[:2]
        rank, rope = self.kv_lora_rank, self.qk_rope_head_dim
        out = query.new_empty(rows, heads, rank)
        grid = (rows, triton.cdiv(heads, MIN_DOT))
        mla_decode_kernel[grid](
            query,
            kv_buffer,
            metadata.kv_slots,
            metadata.decode_kv_start,
            metadata.decode_len,
            out,
            layer.scale,
            heads,
            rank,
            rope,
            query.stride(0),
            query.stride(1),
            kv_buffer.stride(0),
            out.stride(0),
            out.stride(1),
            BLOCK_H=MIN_DOT,
            BLOCK_R=max(MIN_DOT, triton.next_power_of_2(rank)),
            BLOCK_PE=max(MIN_DOT, triton.next_power_of_2(rope)),
            BLOCK_N=self.tuning.decode_block_n,
            **self.tuning.launch_options(),
        )
        return out

    def init_capture(self, limits: CaptureLimits) -> str | None:
        def zeros(n: int, dtype: torch.dtype) -> torch.Tensor:
            return torch.zeros(n, dtype=dtype, device=self.device)

        rows = limits.max_batch
        self._static = {
            "kv_slots": zeros(limits.max_kv_entries, torch.long),
            "new_slots": zeros(rows, torch.long),
            "kv_start": zeros(rows, torch.int32),
            "seq_len": zeros(rows, torch.int32),
            "rows": torch.arange(rows, device=self.device),
        }
        return None

    def capture_metadata(self, batch: int) -> TritonMLAMetadata:
        # `inputs` is read only for extend rows, which a decode bucket has none of: one placeholder
        # for every bucket keeps per-bucket constants out of the captured step.
        static = self._static
        rows = static["rows"][:batch]
        return TritonMLAMetadata(
            inputs=AttentionInputs((1,), (1,), static["kv_slots"][:1].cpu()),
            new_slots=static["new_slots"][:batch],
            decode_rows=rows,
            decode_q_index=rows,
            kv_slots=static["kv_slots"],
            decode_kv_start=static["kv_start"][:batch],
            decode_len=static["seq_len"][:batch],
        )

    def replay_metadata(self, batch: int, inputs: AttentionInputs) -> None:
        static = self._static
        static["kv_slots"][: inputs.kv_slots.numel()].copy_(inputs.kv_slots)
        static["new_slots"][:batch].copy_(inputs.new_slots())
        static["kv_start"][:batch].copy_(torch.tensor(inputs.kv_starts[:-1], dtype=torch.int32))
        static["seq_len"][:batch].copy_(torch.tensor(inputs.seq_lens, dtype=torch.int32))
