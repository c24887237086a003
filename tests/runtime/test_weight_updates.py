"""Replacing a running scheduler's weights by another checkpoint of the same model
(`/update_weights_from_disk`), and reading them back (`/get_weights_by_name`).

Three tiny synthetic GGUFs with a vocabulary: A and B of one shape (different random weights), C
of another. Served quantized (Q4_1 linears: int4 records for the cpu kernels, and a taped
decode step that holds their addresses) and as float32. After A's scheduler takes B's weights,
its greedy tokens are a fresh B scheduler's, every tensor it computes with kept its storage, and
a checkpoint that does not fit is refused without changing anything.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import pytest
import torch

from sglang.runtime.loader.live_weights import model_tensors, read_weight
from sglang.runtime.loader.tokenizer import load_tokenizer
from sglang.runtime.processes.control import GetWeightsByName, UpdateWeightsFromDisk, UpdateWeightsFromTensor
from sglang.runtime.processes.detokenizer import Detokenizer
from sglang.runtime.scheduler.process import build_scheduler
from sglang.runtime.scheduler.scheduler import Scheduler
from sglang.runtime.scheduler.weight_updates import get_weights, update_weights
from sglang.runtime.server_args import ServerArgs

from ..loader.gguf_synth import Shape, gguf_name, random_state_dict, write_gguf
from .runtime_harness import make_request, model_threads, run_requests

SHAPE = Shape()
OTHER_SHAPE = Shape(intermediate=128)
PROMPTS = ([5, 40, 41, 42, 77], [9, 100, 101], [3, 4, 5, 6, 7, 8, 9, 10])


def _write(path: Path, shape: Shape, seed: int, quantized: bool) -> Path:
    state = random_state_dict(shape, seed)
    block = gguf.GGMLQuantizationType.Q4_1 if quantized else None
    write_gguf(
        path, shape, state, quantized_as=lambda name: block if name.startswith("blk.") and "norm" not in name else None
    )
    return path


@pytest.fixture(scope="module", params=["q4_1", "f32"])
def checkpoints(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp(f"weights-{request.param}")
    quantized = request.param == "q4_1"
    return {
        "a": _write(root / "a.gguf", SHAPE, 0, quantized),
        "b": _write(root / "b.gguf", SHAPE, 1, quantized),
        "c": _write(root / "c.gguf", OTHER_SHAPE, 2, quantized),
    }


def scheduler_on(path: Path) -> Scheduler:
    with model_threads():
        scheduler, info = build_scheduler(ServerArgs(model_path=str(path), device="cpu", max_total_tokens=512))
    scheduler.tokenizer_path = info.tokenizer_path  # where the GGUF's vocabulary was written out
    return scheduler


def greedy_tokens(scheduler: Scheduler) -> list[list[int]]:
    detokenizer = Detokenizer(load_tokenizer(Path(scheduler.tokenizer_path)))
    requests = [make_request(p, max_new_tokens=12, ignore_eos=True) for p in PROMPTS]
    with model_threads():
        outcomes = run_requests(scheduler, detokenizer, requests)
    return [outcomes[r.rid].output_ids for r in requests]


def test_a_scheduler_takes_another_checkpoints_weights(checkpoints: dict[str, Path]) -> None:
    scheduler = scheduler_on(checkpoints["a"])
    before = greedy_tokens(scheduler)
    storage = {name: tensor.data_ptr() for name, tensor in model_tensors(scheduler.runner.model).items()}
    expected = greedy_tokens(scheduler_on(checkpoints["b"]))
    assert expected != before, "the two checkpoints must answer differently for this test to mean anything"

    result = update_weights(scheduler, UpdateWeightsFromDisk(str(checkpoints["b"])))
    assert result.success, result.message
    assert scheduler.cache.total_size() == 0, "the prefix cache held KV of the old weights"
    assert greedy_tokens(scheduler) == expected
    after = {name: tensor.data_ptr() for name, tensor in model_tensors(scheduler.runner.model).items()}
    assert after == storage, "a tensor was replaced instead of overwritten (a captured step would miss it)"

    refused = update_weights(scheduler, UpdateWeightsFromDisk(str(checkpoints["c"])))
    assert not refused.success and "different model" in refused.message, refused.message
    missing = update_weights(scheduler, UpdateWeightsFromDisk(str(checkpoints["c"].parent / "none.gguf")))
    assert not missing.success and "none.gguf" in missing.message
    assert greedy_tokens(scheduler) == expected


def test_weights_from_tensors(checkpoints: dict[str, Path]) -> None:
    """Upstream's `update_weights_from_tensor`: B's Hugging Face tensors written into A's dense
    parameters (q/k/v and gate/up into their fused parameters) give B's greedy tokens; a set with
    one bad tensor writes none of them; weights served quantized are refused."""
    scheduler = scheduler_on(checkpoints["a"])
    state = random_state_dict(SHAPE, 1)
    if checkpoints["a"].parent.name.startswith("weights-q4_1"):
        refused = update_weights(scheduler, UpdateWeightsFromTensor(list(state.items())))
        assert not refused.success and "served quantized" in refused.message
        return
    before = read_weight(scheduler.runner.model, "model.norm.weight", 100)
    bad = [("model.norm.weight", state["model.norm.weight"]), ("model.layers.0.mlp.up_proj.weight", torch.ones(3, 3))]
    result = update_weights(scheduler, UpdateWeightsFromTensor(bad))
    assert not result.success and "up_proj" in result.message
    assert read_weight(scheduler.runner.model, "model.norm.weight", 100) == before
    result = update_weights(scheduler, UpdateWeightsFromTensor(list(state.items())))
    assert result.success, result.message
    assert greedy_tokens(scheduler) == greedy_tokens(scheduler_on(checkpoints["b"]))


def test_an_update_waits_for_an_idle_scheduler(checkpoints: dict[str, Path]) -> None:
    scheduler = scheduler_on(checkpoints["a"])
    scheduler.add_request(make_request(PROMPTS[0], max_new_tokens=4))
    result = update_weights(scheduler, UpdateWeightsFromDisk(str(checkpoints["b"])))
    assert not result.success and "running or waiting" in result.message
    greedy_tokens(scheduler)  # drains it


def test_weights_read_by_checkpoint_name(checkpoints: dict[str, Path]) -> None:
    """Hugging Face names, a fused parameter's piece (k_proj of qkv_proj, up_proj of gate_up_proj)
    cut out, the tied lm_head read from the embedding, rows truncated; unknown names refused."""
    scheduler = scheduler_on(checkpoints["b"])
    reader = gguf.GGUFReader(checkpoints["b"])
    source = {t.name: t for t in reader.tensors}
    state = random_state_dict(SHAPE, 1)
    for name in ("model.norm.weight", "model.layers.1.post_attention_layernorm.weight"):
        assert read_weight(scheduler.runner.model, name, 100) == state[name].tolist()
    for name in ("model.layers.0.self_attn.v_proj.weight", "model.layers.1.mlp.up_proj.weight"):
        tensor = source[gguf_name(name)]
        stored = torch.tensor(gguf.quants.dequantize(tensor.data, tensor.tensor_type))
        got = torch.tensor(read_weight(scheduler.runner.model, name, 3))
        assert torch.equal(got, stored.reshape(-1, SHAPE.hidden)[:3].float()), name
    tied = read_weight(scheduler.runner.model, "lm_head.weight", 2)
    assert tied == read_weight(scheduler.runner.model, "model.embed_tokens.weight", 2) and len(tied) == 2
    unknown = get_weights(scheduler, GetWeightsByName("model.nope.weight", 5))
    assert unknown.parameter is None and "model.nope.weight" in (unknown.error or "")
