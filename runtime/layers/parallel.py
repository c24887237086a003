"""Tensor-parallel layers: the sharding is a property of the layer, never of its weight format.

- `ColumnParallelLinear`: a (fused) projection whose output rows are split, each fused part
  separately (q/k/v, gate/up); the output stays split (heads or intermediate units per rank).
- `RowParallelLinear`: input columns split; each rank's partial product is summed (all-reduce).
- `VocabParallelEmbedding`: vocabulary rows split; ids outside a rank's rows embed to zero and
  the all-reduce fills them in from the rank that holds them.
- `ParallelLMHead`: vocabulary rows split; the logits of every rank are gathered in rank order.

Each declares `checkpoint_reads(name)`: the slice of every checkpoint tensor it is filled from,
so the loader reads only this rank's slice. In a group of one every split is whole, reads are
empty and every collective is the identity: the layers are then exactly the plain ones.
"""

from __future__ import annotations

import torch

from sglang import ops
from sglang.runtime.distributed.group import TPGroup, tp_group
from sglang.runtime.layers.linear import Linear, MergedLinear, empty_parameter
from sglang.runtime.layers.module import Module
from sglang.runtime.layers.sharding import Reads, ShardingError, Split, even_split


class ColumnParallelLinear(MergedLinear):
    """`parts` maps each fused checkpoint projection to the rows of it this rank holds."""

    def __init__(self, name: str, in_features: int, parts: dict[str, Split], bias: bool, dtype: torch.dtype) -> None:
        super().__init__(name, in_features, {part: split.size for part, split in parts.items()}, bias, dtype)
        self.splits = parts

    def checkpoint_reads(self, name: str) -> Reads:
        reads: Reads = {}
        for part, split in self.splits.items():
            if split.whole:
                continue
            for kind in ("weight", "bias") if self.bias is not None else ("weight",):
                reads[f"{part}.{kind}"] = split.index(0)
        return reads


class RowParallelLinear(Linear):
    """`x @ W.T (+ b)` for `W`'s columns `split`; `x` holds the matching features (the output of
    a column-parallel layer). A bias (gpt-oss's `o_proj`) is replicated and added once, after the
    sum over ranks."""

    def __init__(
        self, split: Split, out_features: int, dtype: torch.dtype, group: TPGroup | None = None, bias: bool = False
    ) -> None:
        super().__init__(split.size, out_features, bias=bias, dtype=dtype)
        self.split = split
        self.group = group or tp_group()

    def checkpoint_reads(self, name: str) -> Reads:
        return {} if self.split.whole else {f"{name}.weight": self.split.index(1)}

    def partial(self, x: torch.Tensor) -> torch.Tensor:
        """This rank's share of the output, before the sum over ranks and without the bias (a
        LoRA adds its own share here, so the one all-reduce covers both)."""
        return ops.linear(x, self.weight)

    def reduce(self, partial: torch.Tensor) -> torch.Tensor:
        """The sum of the ranks' `partial` outputs, plus the bias (added once)."""
        out = self.group.comm.all_reduce(partial)
        return out if self.bias is None else out + self.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.reduce(self.partial(x))


def vocab_split(vocab_size: int, group: TPGroup) -> Split:
    return even_split(vocab_size, group, "the vocabulary size")


class VocabParallelEmbedding(Module):
    def __init__(self, vocab_size: int, hidden_size: int, dtype: torch.dtype, group: TPGroup | None = None) -> None:
        super().__init__()
        self.group = group or tp_group()
        self.split = vocab_split(vocab_size, self.group)
        self.weight = empty_parameter(self.split.size, hidden_size, dtype=dtype)

    def checkpoint_reads(self, name: str) -> Reads:
        return {} if self.split.whole else {f"{name}.weight": self.split.index(0)}

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        if self.split.whole:
            return ops.embedding(input_ids, self.weight)
        local = input_ids - self.split.start
        outside = (local < 0) | (local >= self.split.size)
        hidden = ops.embedding(local.clamp(0, self.split.size - 1), self.weight)
        return self.group.comm.all_reduce(hidden.masked_fill(outside.unsqueeze(-1), 0))


class ParallelLMHead(Linear):
    """Vocabulary-parallel output projection; with `tied`, the embedding's own shard (both
    split the vocabulary the same way, so the rows match)."""

    def __init__(
        self, hidden_size: int, vocab_size: int, dtype: torch.dtype, tied: VocabParallelEmbedding | None = None
    ) -> None:
        group = tied.group if tied is not None else tp_group()
        split = vocab_split(vocab_size, group)
        super().__init__(hidden_size, split.size, bias=False, dtype=dtype)
        self.group, self.split = group, split
        if tied is not None:
            if tied.split != split:
                raise ShardingError("a tied lm_head must split the vocabulary as the embedding does")
            self.weight = tied.weight

    def checkpoint_reads(self, name: str) -> Reads:
        return {} if self.split.whole else {f"{name}.weight": self.split.index(0)}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.group.comm.all_gather(super().forward(x), dim=-1)
