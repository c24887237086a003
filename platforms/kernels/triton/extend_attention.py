"""Extend attention: new queries against their sequence's cached prefix and themselves (causal).

The new keys and values are stored before this kernel runs, so prefix and new tokens are read
the same way: in place, through the token-level slot list (any page size). A program takes
`BLOCK_M` consecutive new queries of one sequence and one query head; query `i` of a sequence
with `L` tokens, `E` of them new, sits at position `L - E + i` and sees keys at positions
`j <= pos` (and `j > pos - window` with a sliding window). Key blocks wholly outside every row's
view are not visited. Both dots take operands in the KV dtype with float32 accumulation
(`jit_math`'s precision rule); the softmax itself is float32.
"""

from __future__ import annotations

import triton
import triton.language as tl

from sglang.platforms.kernels.triton.jit_math import soft_cap


@triton.jit
def extend_kernel(
    Q,
    Out,
    Cache,
    Sinks,
    KvSlots,
    SeqQStart,
    SeqExtendLen,
    SeqKvStart,
    SeqLen,
    BlockSeq,
    BlockRow,
    scale,
    softcap,
    window,
    group,
    head_dim,
    stride_qt,
    stride_qh,
    stride_ot,
    stride_oh,
    stride_cache_kv,
    stride_cache_slot,
    stride_cache_h,
    HAS_WINDOW: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr,
    HAS_SINKS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """Program (query block, query head): block `b` covers new queries
    `BlockRow[b] .. BlockRow[b] + BLOCK_M` of sequence `BlockSeq[b]`. With `HAS_SINKS` the
    softmax's denominator also holds `exp(Sinks[head])` (a key with no value, gpt-oss)."""
    block = tl.program_id(0)
    head = tl.program_id(1)
    seq = tl.load(BlockSeq + block)
    first = tl.load(BlockRow + block)
    q_start = tl.load(SeqQStart + seq).to(tl.int64)
    extend_len = tl.load(SeqExtendLen + seq)
    kv_start = tl.load(SeqKvStart + seq)
    seq_len = tl.load(SeqLen + seq)
    prefix_len = seq_len - extend_len
    kv_head = head // group

    i = first + tl.arange(0, BLOCK_M)
    i_mask = i < extend_len
    q_pos = prefix_len + i
    d = tl.arange(0, BLOCK_D)
    d_mask = d < head_dim
    q_mask = i_mask[:, None] & d_mask[None, :]
    q = tl.load(Q + (q_start + i)[:, None] * stride_qt + head * stride_qh + d[None, :], mask=q_mask, other=0.0)

    hi = tl.minimum(prefix_len + first + BLOCK_M, seq_len)
    lo = 0
    if HAS_WINDOW:
        lo = tl.maximum(prefix_len + first - window + 1, 0)
    m = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    denom = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    for start in range(lo, hi, BLOCK_N):
        n = start + tl.arange(0, BLOCK_N)
        n_mask = n < hi
        slots = tl.load(KvSlots + kv_start + n, mask=n_mask, other=0).to(tl.int64)
        kv_mask = n_mask[:, None] & d_mask[None, :]
        kv_rows = Cache + slots[:, None] * stride_cache_slot + kv_head * stride_cache_h + d[None, :]
        k = tl.load(kv_rows, mask=kv_mask, other=0.0)
        v = tl.load(kv_rows + stride_cache_kv, mask=kv_mask, other=0.0)
        scores = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        if HAS_SOFTCAP:
            scores = soft_cap(scores, softcap)
        visible = n_mask[None, :] & (n[None, :] <= q_pos[:, None])
        if HAS_WINDOW:
            visible &= n[None, :] > q_pos[:, None] - window
        scores = tl.where(visible, scores, float("-inf"))
        m_new = tl.maximum(m, tl.max(scores, axis=1))
        # A row may see no key of this block yet (window, or a later diagonal): keep exp finite.
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m - m_safe)
        p = tl.exp(scores - m_safe[:, None])
        denom = denom * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee")
        m = m_new
    if HAS_SINKS:
        m_final = tl.where(m == float("-inf"), 0.0, m)
        denom += tl.exp(tl.load(Sinks + head).to(tl.float32) - m_final)
    out = acc / tl.where(denom > 0, denom, 1.0)[:, None]
    tl.store(Out + (q_start + i)[:, None] * stride_ot + head * stride_oh + d[None, :], out, mask=q_mask)
