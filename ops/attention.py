"""Attention over a paged KV cache: the backend interface, its metadata, and the reference.

A step's batch is a list of sequences; sequence `i` has `seq_lens[i]` tokens in the cache after
the step, the last `extend_lens[i]` of which are new in this step (the rest is its cached prefix).
Queries, keys and values of the new tokens are packed sequence after sequence (`[T, H, D]`,
`T = sum(extend_lens)`). Decode is the case `extend_lens == [1] * B`; prefill of an uncached
prompt is `extend_lens == seq_lens`; any mix of the two is a valid batch.

`kv_slots` lists, sequence after sequence, the cache slot of every token of that sequence, its
new tokens included, so the backend both knows where to read and where to write. Where the
runtime keeps windowed layers' K/V in a pool of their own (the window pool), `window_slots` is the
same list in that pool's slots, and windowed layers get inputs built from it (`for_window`).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from itertools import accumulate
from typing import ClassVar

import torch

from sglang.ops import kv_store


@dataclass(frozen=True)
class AttentionLayer:
    """Per-layer facts the kernel needs; fixed at model construction."""

    layer_id: int
    scale: float
    sliding_window: int | None = None
    logit_softcap: float | None = None
    sinks: bool = False
    """Each query head also attends to a learned sink logit, a key with no value (gpt-oss): the
    softmax's denominator gains `exp(sink_h)`. The layer hands the `[Hq]` logits to `forward` as
    `sinks`; only backends whose candidate declares the `sinks` feature are bound for such a model."""


@dataclass(frozen=True)
class AttentionInputs:
    """Backend-neutral description of one step's batch (host-side lengths, device-side slots)."""

    seq_lens: tuple[int, ...]
    extend_lens: tuple[int, ...]
    kv_slots: torch.Tensor
    window_slots: torch.Tensor | None = None
    """Entry for entry the window pool's slot of each `kv_slots` token, or None without a window
    pool. Tokens outside every window of the step (they hold no window slot) read the padding
    slot: only backends that declare `serves_window_slots` (their windowed layers never weigh a
    key outside the window) are handed such lists."""

    def __post_init__(self) -> None:
        if len(self.seq_lens) != len(self.extend_lens):
            raise ValueError("seq_lens and extend_lens differ in length")
        if any(e < 0 or e > s for s, e in zip(self.seq_lens, self.extend_lens)):
            raise ValueError("every extend length must lie in [0, seq_len]")
        if self.kv_slots.numel() != sum(self.seq_lens):
            raise ValueError(f"kv_slots has {self.kv_slots.numel()} entries, expected {sum(self.seq_lens)}")
        if self.window_slots is not None and self.window_slots.shape != self.kv_slots.shape:
            raise ValueError("window_slots and kv_slots differ in length")

    def for_window(self) -> AttentionInputs:
        """The windowed layers' inputs: the same batch over the window pool's slots."""
        if self.window_slots is None:
            raise ValueError("these inputs have no window slots")
        return AttentionInputs(self.seq_lens, self.extend_lens, self.window_slots)

    @property
    def prefix_lens(self) -> tuple[int, ...]:
        return tuple(s - e for s, e in zip(self.seq_lens, self.extend_lens))

    @property
    def is_decode(self) -> bool:
        return all(e == 1 for e in self.extend_lens)

    @property
    def kv_starts(self) -> tuple[int, ...]:
        return (0, *accumulate(self.seq_lens))

    @property
    def q_starts(self) -> tuple[int, ...]:
        return (0, *accumulate(self.extend_lens))

    def new_slots(self) -> torch.Tensor:
        """The slots the step's new tokens are written to, in packed order."""
        starts = self.kv_starts
        parts = [self.kv_slots[starts[i + 1] - e : starts[i + 1]] for i, e in enumerate(self.extend_lens) if e]
        return torch.cat(parts) if parts else self.kv_slots[:0]


@dataclass(frozen=True)
class CaptureLimits:
    """Bounds a captured decode step's static buffers are sized for. A step outside them (more
    rows, a longer row, more KV entries) does not replay: the step runner runs it eagerly."""

    max_batch: int
    """Rows of the largest bucket."""
    max_seq_len: int
    """Longest sequence a step may hold (per-row tables are this wide)."""
    max_kv_entries: int
    """Entries of a step's `kv_slots` the static slot tables hold. Rows that share a prefix (the
    radix cache, `n > 1`, forks) read the same slots, so a batch's entries are bounded by
    `max_batch * max_seq_len`, not by the pool's size; `for_pool` takes the smaller of that and a
    few pools' worth, and steps past it run eagerly."""
    layers: tuple[AttentionLayer, ...] = ()
    """The attention layers a captured step runs: a backend that serves only some layer kinds
    under capture refuses here, before any step is captured."""

    SHARED_POOLS: ClassVar[int] = 4
    """Static slot tables hold this many pools' worth of entries (when that is below the bound):
    enough for heavy prefix sharing without sizing tables for every row at full context."""

    @classmethod
    def for_pool(
        cls, max_batch: int, num_slots: int, max_seq_len: int, layers: tuple[AttentionLayer, ...] = ()
    ) -> CaptureLimits:
        entries = min(max_batch * max_seq_len, cls.SHARED_POOLS * num_slots + max_batch)
        return cls(max_batch=max_batch, max_seq_len=max_seq_len, max_kv_entries=entries, layers=layers)

    def admits(self, inputs: AttentionInputs) -> bool:
        """Whether `inputs` (already padded to its bucket) fits the static buffers."""
        return (
            len(inputs.seq_lens) <= self.max_batch
            and max(inputs.seq_lens, default=0) <= self.max_seq_len
            and inputs.kv_slots.numel() <= self.max_kv_entries
        )


@dataclass
class AttentionMetadata:
    """What `plan` derives once per step and every layer reuses. Backends subclass it."""

    inputs: AttentionInputs
    new_slots: torch.Tensor = field(repr=False)


class AttentionBackend(ABC):
    """One instance per model; `plan` once per step, `forward` once per layer.

    Graph capture (decode buckets, see the runtime's graph runner) uses three optional hooks:
    `init_capture` once, `capture_metadata` once per bucket, `replay_metadata` before each replay.
    A captured step reads only the tensors `capture_metadata` returned, so `replay_metadata` must
    rewrite them in place (same storage, same shapes) and never rebind them.
    """

    page_size: int = 1
    """Tokens per page of the KV pool this backend serves; the runtime sets it after construction
    when its pool pages are larger. Slot `s` is offset `s % page_size` of page `s // page_size`, and
    a sequence's token `i` sits at offset `i % page_size` (the allocator's invariant), so page views
    can be derived from `kv_slots`; 1 (each slot its own page) is always valid."""

    decode_rows_see_each_other: bool = False
    """Whether every decode row of a step attends only after all of the step's new K/V rows are
    stored. Then decode rows may be consecutive tokens of one sequence (each row's slots its
    predecessor's plus its own new slot) and see each other as an extend's causal rows would:
    the captured step runner serves speculative verify steps with its decode buckets that way."""

    serves_window_slots: bool = False
    """Whether windowed layers may keep only their window, in a pool of their own: `forward` is
    then handed metadata planned from `AttentionInputs.for_window` for windowed layers, a
    token-level slot list whose entries outside the window point at the padding slot. A backend
    declares it where it reads such lists as any other and masks keys outside the window before
    weighing them (never reading them as pages, never multiplying a masked key's value by a
    zero weight it could turn into NaN). Without it every layer keeps every token."""

    kv_cache_dtypes: tuple[torch.dtype, ...] = ()
    """KV pool dtypes this backend reads besides its model's own (`--kv-cache-dtype`): every path of
    `forward`, captured ones included, stores K/V rounded to the pool's dtype and reads them back
    converted to the query's. Without it the pool keeps the model's dtype."""

    def __init__(
        self, num_heads: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype, device: torch.device
    ) -> None:
        if num_heads % num_kv_heads:
            raise ValueError(f"{num_heads} query heads are not a multiple of {num_kv_heads} KV heads")
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.dtype = dtype
        self.device = device
        self.kv_dtype = dtype
        """The KV pool's dtype: the model's, or one of `kv_cache_dtypes` the runtime sets after
        construction (before `init_capture`)."""

    def kv_buffer_shape(self, num_slots: int) -> tuple[int, ...]:
        """The layout this backend wants for one layer's KV buffer; the pool allocates it."""
        return (2, num_slots, self.num_kv_heads, self.head_dim)

    def kv_bytes_per_token(self) -> int:
        """Bytes one token's K and V take in one layer's buffer, from the declared layout: the
        KV pool is sized by this, so a backend with another layout sizes its own pool right."""
        slot_elements = math.prod(self.kv_buffer_shape(1))
        return slot_elements * self.kv_dtype.itemsize

    def kv_to_tokens(self, block: torch.Tensor, slot_axis: int) -> torch.Tensor:
        """`block` (`[layers, *kv_buffer_shape(n)]`, the KV of `n` slots read along the layout's
        `slot_axis`) in the portable token-major layout `[layers, n, *per-token shape]`, where
        a K/V backend's token is `[2 (K then V), Hkv, D]` whatever its own layout: the form KV
        crosses between servers in, so backends of different layouts exchange it."""
        return block.movedim(slot_axis + 1, 1)

    def kv_from_tokens(self, tokens: torch.Tensor, slot_axis: int) -> torch.Tensor:
        """The inverse of `kv_to_tokens`: portable `[layers, n, ...]` into this layout's block."""
        return tokens.movedim(1, slot_axis + 1)

    def plan(self, inputs: AttentionInputs) -> AttentionMetadata:
        return AttentionMetadata(inputs=inputs, new_slots=inputs.new_slots())

    def init_capture(self, limits: CaptureLimits) -> str | None:
        """Allocates the static buffers captured decode steps read. Returns why this backend cannot
        run under capture, or None when it can. By default it cannot: `plan` builds new tensors
        (and host-side loops) every step, which a replayed step would never see."""
        return f"{type(self).__name__} has no static decode metadata"

    def capture_metadata(self, batch: int) -> AttentionMetadata:
        """The metadata a bucket of `batch` decode rows is captured with: views of the static buffers
        that `replay_metadata` refills. Called once per bucket, after `init_capture` accepted."""
        raise NotImplementedError(f"{type(self).__name__} cannot run under graph capture")

    def replay_metadata(self, batch: int, inputs: AttentionInputs) -> None:
        """Writes `inputs` (a decode batch already padded to `batch` rows) into that bucket's static
        buffers, in place, before its captured step replays."""
        raise NotImplementedError(f"{type(self).__name__} cannot run under graph capture")

    @abstractmethod
    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        kv_buffer: torch.Tensor,
        metadata: AttentionMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`q` `[T, Hq, D]`, `k`/`v` `[T, Hk, D]` -> (`[T, Hq, D]`, the KV buffer it wrote).

        A backend that serves `layer.sinks` takes a keyword `sinks` (`[Hq]` logits) as well; it
        is passed for such layers only, so backends without the feature keep this signature."""


def visible_mask(q_positions: torch.Tensor, kv_len: int, sliding_window: int | None) -> torch.Tensor:
    """`[n, kv_len]` bool: a query at position p sees keys at positions `p - window < j <= p`."""
    kv_positions = torch.arange(kv_len, device=q_positions.device)
    mask = kv_positions[None, :] <= q_positions[:, None]
    if sliding_window is not None:
        mask &= kv_positions[None, :] > q_positions[:, None] - sliding_window
    return mask


class ReferenceAttention(AttentionBackend):
    """Eager float32 softmax attention, one sequence at a time: the correctness oracle."""

    serves_window_slots = True
    kv_cache_dtypes = (torch.bfloat16,)  # reads every K/V row as float32

    def forward(self, q, k, v, kv_buffer, metadata, layer, sinks=None):
        kv_buffer = kv_store.store_kv(kv_buffer, metadata.new_slots, k, v)
        inputs = metadata.inputs
        group = self.num_heads // self.num_kv_heads
        out = torch.empty_like(q)
        q_starts, kv_starts = inputs.q_starts, inputs.kv_starts
        for i, (seq_len, prefix_len) in enumerate(zip(inputs.seq_lens, inputs.prefix_lens)):
            if q_starts[i] == q_starts[i + 1]:
                continue
            slots = inputs.kv_slots[kv_starts[i] : kv_starts[i + 1]]
            keys = kv_buffer[0, slots].float().repeat_interleave(group, dim=1)
            values = kv_buffer[1, slots].float().repeat_interleave(group, dim=1)
            queries = q[q_starts[i] : q_starts[i + 1]].float()
            scores = torch.einsum("qhd,khd->hqk", queries, keys) * layer.scale
            if layer.logit_softcap is not None:
                scores = layer.logit_softcap * torch.tanh(scores / layer.logit_softcap)
            q_positions = torch.arange(prefix_len, seq_len, device=q.device)
            mask = visible_mask(q_positions, seq_len, layer.sliding_window)
            scores = scores.masked_fill(~mask[None], float("-inf"))
            if sinks is not None:  # a sink column: in the softmax's denominator, with no value
                sink_column = sinks.float()[:, None, None].expand(-1, scores.shape[1], 1)
                scores = torch.cat([scores, sink_column], dim=-1)
            probs = scores.softmax(dim=-1)[..., :seq_len]
            out[q_starts[i] : q_starts[i + 1]] = torch.einsum("hqk,khd->qhd", probs, values).to(q.dtype)
        return out, kv_buffer
