"""Tensor parallelism keeps the embedded GGUF's quantized weights: tp=2 over gloo, each rank
holding its shard of the int4/int8 tensors (rows of column-parallel layers and of the
vocabulary, group-aligned input columns of row-parallel ones), gives the logits of tp=1 on the
same quantized weights within the float32 summation-order tolerance, and the same greedy tokens.

Also, without the model: a quantized weight cut into row-parallel column shards computes the
same product as the whole weight once the shards' partial products are summed, and a cut that
splits a group is refused with the reason."""

from __future__ import annotations

import pytest
import torch

from sglang.ci.suites.model_harness import SCHEDULES, make_prompts, max_abs_error, run_schedule
from sglang.ops.quant import QuantizedWeight, WeightFormat, quantize
from sglang.runtime.layers.quantized import rank_shard
from sglang.runtime.layers.sharding import ShardingError
from sglang.runtime.loader import model_loading
from sglang.runtime.server_args import ServerArgs

from .rank_processes import join_gloo, run_ranks

WORLD_SIZE = 2
# Row-parallel partial sums over 2 ranks reorder the float32 additions of each dot product, and
# the kernels block a half-width reduction differently; over 30 layers, on logits of magnitude
# about 20, that stays below 1e-2 (relative 5e-4).
QUANTIZED_TP_ATOL = 2e-2


def _embedded_logits(prompts: list[torch.Tensor]) -> tuple[list[torch.Tensor], dict[str, int]]:
    loaded = model_loading.load_model(ServerArgs(device="cpu", max_total_tokens=512))
    formats: dict[str, int] = {}
    for module in loaded.model.modules():
        weight = getattr(module, "weight", None)
        if isinstance(weight, QuantizedWeight):
            formats[weight.format.name] = formats.get(weight.format.name, 0) + 1
    return run_schedule(loaded.model, loaded.platform.device(), prompts, SCHEDULES["decode"]()), formats


def _rank(rank: int, rendezvous: str, out: str) -> None:
    join_gloo(rank, WORLD_SIZE, rendezvous)
    logits, formats = _embedded_logits(make_prompts(49152))
    if rank == 0:
        torch.save({"logits": logits, "formats": formats}, out)
    torch.distributed.destroy_process_group()


@pytest.mark.slow
def test_tp2_on_the_quantized_embedded_model_matches_tp1(tmp_path) -> None:
    run_ranks(_rank, (str(tmp_path / "rendezvous"), str(tmp_path / "tp2.pt")), WORLD_SIZE)
    tp2 = torch.load(tmp_path / "tp2.pt")
    tp1, formats = _embedded_logits(make_prompts(49152))
    assert tp2["formats"] == formats and formats.get("int4_g32", 0) > 0  # still quantized under tp
    assert max_abs_error(tp2["logits"], tp1) <= QUANTIZED_TP_ATOL
    for ours, reference in zip(tp2["logits"], tp1):
        assert torch.equal(ours.argmax(-1), reference.argmax(-1))


@pytest.mark.parametrize("fmt", ["int4_g32", "int8_g32", "int8_channel"])
def test_row_parallel_shards_sum_to_the_whole_product(fmt: str) -> None:
    weight = quantize(torch.randn(24, 128, generator=torch.Generator().manual_seed(0)), WeightFormat.parse(fmt))
    x = torch.randn(3, 128)
    whole = x @ weight.dequantize().T
    if fmt == "int8_channel":  # one group spans the row: it cannot be cut
        with pytest.raises(ShardingError, match="do not fall on groups"):
            rank_shard(weight, (slice(None), slice(0, 64)))
        return
    shards = [rank_shard(weight, (slice(None), slice(start, start + 64))) for start in (0, 64)]
    assert all(s.shape == (24, 64) for s in shards)
    partial = sum(x[:, i * 64 : (i + 1) * 64] @ s.dequantize().T for i, s in enumerate(shards))
    torch.testing.assert_close(partial, whole, rtol=0, atol=1e-5)
    assert torch.equal(rank_shard(weight, (slice(8, 16),)).dequantize(), weight.dequantize()[8:16])


def test_a_cut_inside_an_int4_block_is_refused() -> None:
    weight = quantize(torch.randn(4, 128), WeightFormat.parse("int4_g32"))
    with pytest.raises(ShardingError, match="tensor-parallel size"):
        rank_shard(weight, (slice(None), slice(16, 80)))
