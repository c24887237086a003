"""Paged decode attention: split-KV partials per (row, KV head, split), merged by log-sum-exp.

A decode row is a sequence with one new query at position `L - 1` (its key already stored). Its
visible keys `[lo, L)` (`lo = L - window` with a sliding window, else 0) are cut into
`NUM_SPLITS` block-aligned chunks; each program attends the query heads of one KV head (the GQA
group, padded to `BLOCK_G >= 16` rows for `tl.dot`) over one chunk, reading keys and values in
place through the token-level slot list, so any page size is served. Partial outputs and their
log-sum-exp go to float32 scratch; the merge kernel combines the splits into the output row.
Both dots take operands in the KV dtype with float32 accumulation (see `jit_math`'s module
docstring for the precision rule); the softmax itself is float32.
Splits past the end of a short sequence are empty: their programs return at once and the merge
reads only the splits that hold keys (so the scratch needs no initialization).
"""

from __future__ import annotations

import triton
import triton.language as tl

from sglang.platforms.kernels.triton.jit_math import soft_cap


@triton.jit
def _split_plan(seq_len, window, HAS_WINDOW: tl.constexpr, NUM_SPLITS: tl.constexpr, BLOCK_N: tl.constexpr):
    """`(lo, per_split, used)`: visible keys start at `lo`; split `s` covers
    `[lo + s * per_split, lo + (s + 1) * per_split)` cut at `seq_len`; `used` splits hold keys."""
    lo = seq_len * 0  # a tensor either way, so every branch returns the same types
    if HAS_WINDOW:
        lo = tl.maximum(seq_len - window, 0)
    # Ceiling divisions written out: `tl.cdiv` is a device function call, slow in the interpreter.
    span = seq_len - lo
    per_split = ((span + NUM_SPLITS - 1) // NUM_SPLITS + BLOCK_N - 1) // BLOCK_N * BLOCK_N
    return lo, per_split, (span + per_split - 1) // per_split


@triton.jit
def decode_split_kernel(
    Q,
    Cache,
    KvSlots,
    SeqQStart,
    SeqKvStart,
    SeqLen,
    DecodeSeqs,
    PartialOut,
    PartialLse,
    scale,
    softcap,
    window,
    group,
    head_dim,
    stride_qt,
    stride_qh,
    stride_cache_kv,
    stride_cache_slot,
    stride_cache_h,
    stride_po_row,
    stride_po_h,
    stride_po_split,
    stride_pl_row,
    stride_pl_h,
    HAS_WINDOW: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    BLOCK_G: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """Program (row, kv head, split): `PartialOut[row, h, split] = softmax-weighted V` over the
    split's keys and `PartialLse[row, h, split]` its log-sum-exp; nothing when the split is empty."""
    row = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    seq = tl.load(DecodeSeqs + row)
    q_token = tl.load(SeqQStart + seq).to(tl.int64)
    kv_start = tl.load(SeqKvStart + seq)
    seq_len = tl.load(SeqLen + seq)
    lo, per_split, used = _split_plan(seq_len, window, HAS_WINDOW, NUM_SPLITS, BLOCK_N)
    if split >= used:
        return
    split_lo = lo + split * per_split
    split_hi = tl.minimum(split_lo + per_split, seq_len)

    g = tl.arange(0, BLOCK_G)
    d = tl.arange(0, BLOCK_D)
    heads = kv_head * group + g
    g_mask = g < group
    d_mask = d < head_dim
    q = tl.load(
        Q + q_token * stride_qt + heads[:, None] * stride_qh + d[None, :],
        mask=g_mask[:, None] & d_mask[None, :],
        other=0.0,
    )
    m = tl.full([BLOCK_G], float("-inf"), dtype=tl.float32)
    denom = tl.zeros([BLOCK_G], dtype=tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], dtype=tl.float32)
    for start in range(split_lo, split_hi, BLOCK_N):
        n = start + tl.arange(0, BLOCK_N)
        n_mask = n < split_hi
        slots = tl.load(KvSlots + kv_start + n, mask=n_mask, other=0).to(tl.int64)
        kv_mask = n_mask[:, None] & d_mask[None, :]
        kv_rows = Cache + slots[:, None] * stride_cache_slot + kv_head * stride_cache_h + d[None, :]
        k = tl.load(kv_rows, mask=kv_mask, other=0.0)
        v = tl.load(kv_rows + stride_cache_kv, mask=kv_mask, other=0.0)
        scores = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        if HAS_SOFTCAP:
            scores = soft_cap(scores, softcap)
        scores = tl.where(n_mask[None, :], scores, float("-inf"))
        # Every iteration has a visible key, so m_new is finite.
        m_new = tl.maximum(m, tl.max(scores, axis=1))
        alpha = tl.exp(m - m_new)
        p = tl.exp(scores - m_new[:, None])
        denom = denom * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee")
        m = m_new
    # The split holds a key, so every row's denom >= 1 (its best key weighs exp(0)).
    lse = m + tl.log(denom)
    po = PartialOut + row * stride_po_row + heads[:, None] * stride_po_h + split * stride_po_split + d[None, :]
    tl.store(po, acc / denom[:, None], mask=g_mask[:, None] & d_mask[None, :])
    tl.store(PartialLse + row * stride_pl_row + heads * stride_pl_h + split, lse, mask=g_mask)


@triton.jit
def decode_merge_kernel(
    PartialOut,
    PartialLse,
    Out,
    Sinks,
    SeqQStart,
    SeqLen,
    DecodeSeqs,
    window,
    group,
    head_dim,
    stride_po_row,
    stride_po_h,
    stride_po_split,
    stride_pl_row,
    stride_pl_h,
    stride_ot,
    stride_oh,
    HAS_WINDOW: tl.constexpr,
    HAS_SINKS: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    BLOCK_G: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """Program (row, kv head): for each query head `h` of the group,
    `Out[q_token, h] = sum_s w_s PartialOut[row, h, s]` with `w = softmax(PartialLse[row, h, :used])`,
    merged online split by split; split 0 always holds the key `L - 1`, so `used >= 1`. With
    `HAS_SINKS` the sink `Sinks[h]` joins the softmax as one more split whose output is zero."""
    row = tl.program_id(0)
    kv_head = tl.program_id(1)
    seq = tl.load(DecodeSeqs + row)
    _, _, used = _split_plan(tl.load(SeqLen + seq), window, HAS_WINDOW, NUM_SPLITS, BLOCK_N)
    g = tl.arange(0, BLOCK_G)
    d = tl.arange(0, BLOCK_D)
    heads = kv_head * group + g
    g_mask = g < group
    mask = g_mask[:, None] & (d[None, :] < head_dim)
    po = PartialOut + row * stride_po_row + heads[:, None] * stride_po_h + d[None, :]
    pl = PartialLse + row * stride_pl_row + heads * stride_pl_h
    m = tl.full([BLOCK_G], float("-inf"), dtype=tl.float32)
    total = tl.zeros([BLOCK_G], dtype=tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], dtype=tl.float32)
    for split in range(0, used):
        lse = tl.load(pl + split, mask=g_mask, other=0.0)
        m_new = tl.maximum(m, lse)
        alpha = tl.exp(m - m_new)
        weight = tl.exp(lse - m_new)
        total = total * alpha + weight
        acc = acc * alpha[:, None] + weight[:, None] * tl.load(po + split * stride_po_split, mask=mask, other=0.0)
        m = m_new
    if HAS_SINKS:
        total += tl.exp(tl.load(Sinks + heads, mask=g_mask, other=float("-inf")).to(tl.float32) - m)
    q_token = tl.load(SeqQStart + seq).to(tl.int64)
    tl.store(Out + q_token * stride_ot + heads[:, None] * stride_oh + d[None, :], acc / total[:, None], mask=mask)
