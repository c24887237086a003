"""LoRA under tensor parallelism, without processes: the LoRA layers of two ranks, each built as
its rank builds them, hold their shards of an adapter, and their outputs put together as the
model does (column-parallel: concatenated per fused part; row-parallel: summed by the layer's
all-reduce) equal one rank's output on the whole weights.

The group's communicator here is the single-process one (its all-reduce is the identity), so
each rank's row-parallel output is its partial sum, base and LoRA together; summing the two
ranks' is what gloo's all-reduce does (the tp=2 engine test runs that for real, under slow)."""

from __future__ import annotations

import torch

from sglang.ops.collectives import SingleProcessCommunicator
from sglang.runtime.distributed.group import TPGroup
from sglang.runtime.layers.parallel import ColumnParallelLinear, RowParallelLinear
from sglang.runtime.layers.sharding import Split, even_split, whole
from sglang.runtime.lora.layers import LoraLinear, LoraState

HIDDEN, Q_ROWS, KV_ROWS, RANK, SLOTS = 16, 8, 4, 4, 3
GEN = torch.Generator().manual_seed(0)


def random(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=GEN)


def group(rank: int, size: int) -> TPGroup:
    return TPGroup(rank, size, SingleProcessCommunicator())


def state() -> LoraState:
    scaling = torch.tensor([0.0, 2.0, 0.5])  # slot 0 is the base model's
    return LoraState(scaling=scaling, token_slots=torch.tensor([1, 0, 2, 1]))


def qkv_lora(g: TPGroup, weight: torch.Tensor, adapters: dict) -> LoraLinear:
    splits = {
        "q_proj": even_split(Q_ROWS, g, "q"),
        "k_proj": even_split(KV_ROWS, g, "k"),
        "v_proj": even_split(KV_ROWS, g, "v"),
    }
    base = ColumnParallelLinear("qkv_proj", HIDDEN, splits, bias=False, dtype=torch.float32)
    rows = [weight[name][split.index(0)] for name, split in splits.items()]
    base.weight.data.copy_(torch.cat(rows))
    layer = LoraLinear(base, tuple(splits), SLOTS, RANK, state())
    for slot, per_part in adapters.items():
        for part, (a, b) in enumerate(per_part):
            layer.write(slot, part, a, b)
    return layer


def test_column_parallel_lora_shards_b_by_output_rows() -> None:
    weight = {"q_proj": random(Q_ROWS, HIDDEN), "k_proj": random(KV_ROWS, HIDDEN), "v_proj": random(KV_ROWS, HIDDEN)}
    # Slot 1: rank 4 on all three parts; slot 2: rank 2 on q and v only (k stays zero).
    adapters = {
        1: [(random(RANK, HIDDEN), random(rows, RANK)) for rows in (Q_ROWS, KV_ROWS, KV_ROWS)],
        2: [(random(2, HIDDEN), random(Q_ROWS, 2)), (None, None), (random(2, HIDDEN), random(KV_ROWS, 2))],
    }
    x = random(4, HIDDEN)
    whole_out = qkv_lora(group(0, 1), weight, adapters).forward(x).split((Q_ROWS, KV_ROWS, KV_ROWS), -1)
    ranks = [qkv_lora(group(r, 2), weight, adapters) for r in range(2)]
    assert ranks[0].a.shape == (SLOTS, 3 * RANK, HIDDEN)  # A whole: the input is whole on every rank
    assert ranks[0].b.shape == (SLOTS, (Q_ROWS + 2 * KV_ROWS) // 2, RANK)
    shards = [layer.split(layer.forward(x)) for layer in ranks]
    for part, expected in enumerate(whole_out):
        torch.testing.assert_close(torch.cat([s[part] for s in shards], -1), expected, rtol=0, atol=1e-5)
    base_only = x @ weight["q_proj"].T
    assert not torch.allclose(whole_out[0], base_only, atol=1e-3)  # the adapter moved the output


def down_lora(split: Split, weight: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> LoraLinear:
    base = RowParallelLinear(split, HIDDEN, torch.float32, group(0, 1))
    base.weight.data.copy_(weight[split.index(1)])
    layer = LoraLinear(base, ("down_proj",), SLOTS, RANK, state())
    layer.write(1, 0, a, b)
    return layer


def test_row_parallel_lora_shards_a_by_input_and_one_sum_covers_it() -> None:
    inner = 12
    weight, a, b = random(HIDDEN, inner), random(RANK, inner), random(HIDDEN, RANK)
    x = random(4, inner)
    expected = down_lora(whole(inner), weight, a, b).forward(x)
    splits = [even_split(inner, group(r, 2), "inner") for r in range(2)]
    ranks = [down_lora(split, weight, a, b) for split in splits]
    assert ranks[1].a.shape == (SLOTS, RANK, inner // 2) and ranks[1].b.shape == (SLOTS, HIDDEN, RANK)
    partials = [layer.forward(x[:, split.start : split.start + split.size]) for layer, split in zip(ranks, splits)]
    torch.testing.assert_close(partials[0] + partials[1], expected, rtol=0, atol=1e-5)
    assert not torch.allclose(expected, x @ weight.T, atol=1e-3)
