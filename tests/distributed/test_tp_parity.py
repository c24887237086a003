"""tp=2 over gloo on loopback: the logits of every position equal tp=1's (and transformers')
within fp32 tolerance, through one extend step and through prefill + ragged decode steps, for
tiny random-weight models covering every sharded layer: Llama with tied embeddings and a single
KV head (replicated on both ranks), Llama with 3 KV heads (GQA groups dealt out 2 + 1), Qwen3
(q/k norm, head_dim != hidden / heads), Qwen2-MoE (QKV biases, experts and a shared expert) and
Mixtral (experts under a checkpoint rename), Gemma 2 (windows, soft-caps, sandwich norms), Phi-3
(q/k/v and gate/up stored fused, each part cut by its own split) and GLM-4-MoE (grouped routing
over a replicated router, shared experts, a dense first layer) and DeepSeek-V2 (multi-head latent
attention with its heads split and the latent projection replicated; group-limited routing).

Each rank loads its shard with the server's loader from the saved safetensors folder, reading
only its slices."""

from __future__ import annotations

import pytest
import torch

from sglang.ci.suites.model_harness import (
    FP32_ATOL,
    SCHEDULES,
    SPECS_BY_NAME,
    Checkpoint,
    ModelSpec,
    TargetSpec,
    bound_ops,
    build_checkpoint,
    load_model,
    make_prompts,
    max_abs_error,
    run_schedule,
)
from sglang.runtime.loader import model_loading
from sglang.runtime.server_args import ServerArgs

from .rank_processes import join_gloo, run_ranks

WORLD_SIZE = 2
SCHEDULE_NAMES = ("extend", "decode")


def _spec(name: str, **overrides) -> ModelSpec:
    base = SPECS_BY_NAME[name]
    return ModelSpec(f"{name}-tp", base.config_cls, base.architecture, {**base.overrides, **overrides})


TP_SPECS = (
    _spec("llama-tied", num_key_value_heads=1),
    _spec("llama", hidden_size=96, num_attention_heads=6, num_key_value_heads=3),
    _spec("qwen3-qknorm"),
    _spec("qwen2-moe-shared"),
    _spec("mixtral"),
    _spec("gemma2-softcap"),
    _spec("phi3-longrope"),
    _spec("glm4-moe-grouped"),
    _spec("deepseek-v2-mla"),
)


def _rank_logits(rank: int, rendezvous: str, folders: list[str], out: str) -> None:
    """One rank: loads each model's shard through the server's loader and runs the schedules."""
    group = join_gloo(rank, WORLD_SIZE, rendezvous)
    results = {}
    for folder in folders:
        loaded = model_loading.load_model(ServerArgs(model_path=folder, device="cpu", dtype="float32"))
        prompts = make_prompts(loaded.config.vocab_size)
        device = loaded.platform.device()
        results[folder] = {
            name: run_schedule(loaded.model, device, prompts, SCHEDULES[name]()) for name in SCHEDULE_NAMES
        }
        results[folder]["heads"] = loaded.model.attention_heads
    if group.rank == 0:
        torch.save(results, out)
    torch.distributed.destroy_process_group()


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> list[Checkpoint]:
    root = tmp_path_factory.mktemp("tp-models")
    return [build_checkpoint(spec, root / spec.name) for spec in TP_SPECS]


@pytest.fixture(scope="module")
def tp2_logits(checkpoints: list[Checkpoint], tmp_path_factory: pytest.TempPathFactory) -> dict:
    work = tmp_path_factory.mktemp("tp-run")
    out = work / "logits.pt"
    run_ranks(_rank_logits, (str(work / "rendezvous"), [str(c.path) for c in checkpoints], str(out)), WORLD_SIZE)
    return torch.load(out)


def _tp1_logits(checkpoint: Checkpoint, schedule: str) -> list[torch.Tensor]:
    with bound_ops(TargetSpec("cpu")) as target:
        model = load_model(checkpoint, torch.float32, target)
        return run_schedule(model, target.device, checkpoint.prompts, SCHEDULES[schedule]())


@pytest.mark.parametrize("schedule", SCHEDULE_NAMES)
@pytest.mark.parametrize("index", range(len(TP_SPECS)), ids=[s.name for s in TP_SPECS])
def test_tp2_logits_equal_tp1(checkpoints: list[Checkpoint], tp2_logits: dict, index: int, schedule: str) -> None:
    checkpoint = checkpoints[index]
    ours = tp2_logits[str(checkpoint.path)][schedule]
    tp1 = _tp1_logits(checkpoint, schedule)
    assert max_abs_error(ours, tp1) <= FP32_ATOL
    assert max_abs_error(ours, checkpoint.reference) <= FP32_ATOL


def test_rank0_computes_its_share_of_the_heads(checkpoints: list[Checkpoint], tp2_logits: dict) -> None:
    shares = [tp2_logits[str(c.path)]["heads"] for c in checkpoints]
    assert shares[:2] == [(2, 1), (4, 2)]  # one KV head replicated; 3 KV heads dealt out 2 + 1
    assert all(heads == c.config.num_heads // 2 for (heads, _), c in zip(shares[2:], checkpoints[2:]))
