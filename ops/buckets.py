"""Which padded batch sizes a static-shape decode step is built for.

Graph capture (CUDA graphs, traced steps on cpu), compiled decode (inductor) and jitted steps
(JAX) all need a bounded set of static batch shapes: a decode batch of `n` rows runs as the
smallest bucket `>= n`, the extra rows padded (a platform with exact buckets has one per size).
Padded rows write their K/V to a scratch slot and are never sampled, so padding changes no real
row's result. Batches larger than the largest bucket run eagerly.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass


@dataclass(frozen=True)
class BucketPolicy:
    sizes: tuple[int, ...]
    """Ascending, distinct, positive batch sizes."""

    def __post_init__(self) -> None:
        if not self.sizes or list(self.sizes) != sorted(set(self.sizes)) or self.sizes[0] < 1:
            raise ValueError(f"bucket sizes must be ascending, distinct and positive, got {self.sizes}")

    @classmethod
    def up_to(cls, max_batch: int) -> BucketPolicy:
        """1, 2, 4, 8, then every multiple of 8 to 32, then of 16, up to `max_batch` (included):
        padding wastes at most a few rows where batches are small and at most 16 beyond."""
        sizes = [s for s in (1, 2, 4) if s < max_batch]
        step_sizes = [*range(8, 33, 8), *range(48, max_batch + 16, 16)]
        sizes += [s for s in step_sizes if s < max_batch]
        return cls(tuple(sorted({*sizes, max_batch})))

    @property
    def largest(self) -> int:
        return self.sizes[-1]

    def bucket_for(self, batch: int) -> int | None:
        """The smallest bucket that holds `batch` rows, or None when none does (run eagerly)."""
        if batch < 1:
            raise ValueError(f"a batch has at least one row, got {batch}")
        index = bisect_left(self.sizes, batch)
        return self.sizes[index] if index < len(self.sizes) else None
