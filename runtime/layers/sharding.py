"""Which slice of a checkpoint tensor one tensor-parallel rank holds.

A `Split` is a contiguous range of one dimension of a checkpoint tensor. The vocabulary and the
MLP and expert intermediate sizes split evenly and must divide by the group's size, else
building the model fails with `ShardingError` naming what does not divide: a bad `--tp-size`
fails at startup with the reason.

Attention heads split by whole GQA groups (a KV head and the query heads that read it). With at
least as many KV heads as ranks, the groups are dealt out as evenly as they go: 3 KV heads over 2
ranks give one rank 2 groups and the other 1 (row-parallel sums do not need equal shares). With
fewer KV heads than ranks, each KV head is replicated on `size / num_kv_heads` ranks, which split
its query heads evenly; that needs the size to be a multiple of the KV heads and the query heads
to divide by the size.

Invariant: over the ranks of a group, the splits of a split dimension are disjoint and cover it
in rank order, so concatenating (all-gather) or summing (all-reduce) the ranks' partial results
gives the unsharded result.
"""

from __future__ import annotations

from dataclasses import dataclass

from sglang.runtime.distributed.group import TPGroup

Index = tuple[slice, ...]
Reads = dict[str, Index]
"""Checkpoint tensor name (relative to the declaring module's parent) -> the slice to read."""


class ShardingError(ValueError):
    """The model cannot be split over this many ranks; the message says what does not divide."""


@dataclass(frozen=True)
class Split:
    """Rows `[start, start + size)` of a dimension of length `total`."""

    start: int
    size: int
    total: int

    @property
    def whole(self) -> bool:
        return self.size == self.total

    def index(self, dim: int) -> Index:
        """The index that cuts this split out of dimension `dim`."""
        return (slice(None),) * dim + (slice(self.start, self.start + self.size),)

    def scaled(self, factor: int) -> Split:
        """The same split in units `factor` times smaller (heads -> rows of `head_dim` each)."""
        return Split(self.start * factor, self.size * factor, self.total * factor)


def whole(total: int) -> Split:
    return Split(0, total, total)


def even_split(total: int, group: TPGroup, what: str) -> Split:
    if total % group.size:
        raise ShardingError(f"{what} ({total}) is not divisible by the tensor-parallel size {group.size}")
    size = total // group.size
    return Split(group.rank * size, size, total)


def balanced_split(total: int, group: TPGroup) -> Split:
    """`total` units dealt out in rank order, the first `total % size` ranks one more."""
    base, extra = divmod(total, group.size)
    return Split(group.rank * base + min(group.rank, extra), base + (group.rank < extra), total)


def attention_heads(num_heads: int, num_kv_heads: int, group: TPGroup) -> tuple[Split, Split]:
    """This rank's (query heads, KV heads), in heads."""
    if num_heads % num_kv_heads:
        raise ShardingError(f"{num_heads} attention heads do not form groups over {num_kv_heads} KV heads")
    if num_kv_heads >= group.size:
        kv = balanced_split(num_kv_heads, group)
        return kv.scaled(num_heads // num_kv_heads), kv
    if group.size % num_kv_heads:
        raise ShardingError(
            f"the tensor-parallel size {group.size} is not a multiple of the number of KV heads ({num_kv_heads}): "
            "KV heads cannot be replicated evenly"
        )
    head = group.rank // (group.size // num_kv_heads)
    return even_split(num_heads, group, "the number of attention heads"), Split(head, 1, num_kv_heads)
