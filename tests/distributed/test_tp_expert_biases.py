"""gpt-oss's biased experts under tensor parallelism: each rank holds its share of the gate/up
rows with their biases, and only the first rank adds the down bias, so the sum of the ranks'
partial outputs is the unsplit experts' output.

By default, in one process: the two ranks' `Experts` are built and loaded side by side (no
processes, a fraction of a second). Slow: gpt-oss at tp=2 over gloo through the server's loader,
every position's logits equal tp=1's and transformers' (`test_tp_parity.py`'s harness)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from sglang.ci.suites.model_harness import (
    FP32_ATOL,
    SCHEDULES,
    SPECS_BY_NAME,
    TargetSpec,
    bound_ops,
    build_checkpoint,
    load_model,
    max_abs_error,
    run_schedule,
)
from sglang.ops.collectives import SingleProcessCommunicator
from sglang.ops.moe import moe_experts
from sglang.runtime.distributed.group import TPGroup, using_tp_group
from sglang.runtime.layers.moe import Experts
from sglang.runtime.models.weights import checkpoint_reads, load_weights

from .rank_processes import run_ranks
from .test_tp_parity import SCHEDULE_NAMES, WORLD_SIZE, _rank_logits

EXPERTS, HIDDEN, INTER, TOKENS, TOP_K = 4, 16, 8, 5, 2


def _loaded_experts(rank: int, size: int, tensors: dict[str, torch.Tensor]) -> Experts:
    with using_tp_group(TPGroup(rank, size, SingleProcessCommunicator())):
        holder = nn.Module()
        holder.experts = Experts(EXPERTS, HIDDEN, INTER, torch.float32, biased=True)
    load_weights(holder, tensors.items(), reads=checkpoint_reads(holder))
    return holder.experts


def _output(experts: Experts, x: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    w13, w2 = experts.gate_up_proj, experts.down_proj
    return moe_experts(x, w13, w2, weights, ids, "swigluoai", **experts.biases())


def test_ranks_partial_outputs_sum_to_the_unsplit_experts() -> None:
    gen = torch.Generator().manual_seed(0)
    tensors = {}
    for e in range(EXPERTS):
        shapes = {"gate_proj": (INTER, HIDDEN), "up_proj": (INTER, HIDDEN), "down_proj": (HIDDEN, INTER)}
        for proj, shape in shapes.items():
            tensors[f"experts.{e}.{proj}.weight"] = torch.randn(shape, generator=gen)
            tensors[f"experts.{e}.{proj}.bias"] = torch.randn(shape[0], generator=gen)
    x = torch.randn(TOKENS, HIDDEN, generator=gen)
    weights = torch.rand(TOKENS, TOP_K, generator=gen)
    ids = torch.stack([torch.randperm(EXPERTS, generator=gen)[:TOP_K] for _ in range(TOKENS)])
    whole = _output(_loaded_experts(0, 1, tensors), x, weights, ids)
    ranks = [_loaded_experts(r, WORLD_SIZE, tensors) for r in range(WORLD_SIZE)]
    assert [r.gate_up_bias.shape for r in ranks] == [(EXPERTS, INTER)] * WORLD_SIZE  # half of 2 * INTER each
    assert [("w2_bias" in r.biases() and r.biases()["w2_bias"] is not None) for r in ranks] == [True, False]
    split = sum(_output(r, x, weights, ids) for r in ranks)
    assert max_abs_error([split], [whole]) <= 1e-4
    assert whole.abs().max() > 1.0  # biases of order one: a bias dropped or doubled would show


@pytest.mark.slow
def test_gpt_oss_tp2_logits_equal_tp1(tmp_path: pytest.TempPathFactory) -> None:
    """Two gloo ranks, each loading its shard through the server's loader (about a minute)."""
    checkpoint = build_checkpoint(SPECS_BY_NAME["gpt-oss-sinks"], tmp_path / "gpt-oss")
    out = tmp_path / "logits.pt"
    run_ranks(_rank_logits, (str(tmp_path / "rendezvous"), [str(checkpoint.path)], str(out)), WORLD_SIZE)
    tp2 = torch.load(out)[str(checkpoint.path)]
    assert tp2["heads"] == (checkpoint.config.num_heads // 2, checkpoint.config.num_kv_heads // 2)
    for schedule in SCHEDULE_NAMES:
        with bound_ops(TargetSpec("cpu")) as target:
            model = load_model(checkpoint, torch.float32, target)
            tp1 = run_schedule(model, target.device, checkpoint.prompts, SCHEDULES[schedule]())
        assert max_abs_error(tp2[schedule], tp1) <= FP32_ATOL, schedule
        assert max_abs_error(tp2[schedule], checkpoint.reference) <= FP32_ATOL, schedule
