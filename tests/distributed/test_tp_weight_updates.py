"""Weight updates under `--tp-size 2`: rank 0 sends the reload (`update_weights_from_disk`) or the
tensors (`update_weights_from_tensor`) to the other rank, each keeps its own shard, and the
engine's greedy tokens become those of a tp=1 scheduler on the new checkpoint (tiny synthetic
GGUFs: Q4_1 linears with their int4 shards and kernel records, and float32).
`get_weights_by_name` reads rank 0's shard."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import gguf
import pytest

from sglang.runtime.engine import Engine

from ..loader.gguf_synth import Shape, random_state_dict, write_gguf
from ..runtime.test_weight_updates import PROMPTS, greedy_tokens, scheduler_on

SHAPE = Shape(intermediate=128)  # row-parallel shards on whole 32-value groups


def _write(path: Path, seed: int) -> Path:
    q4_1 = gguf.GGMLQuantizationType.Q4_1
    quantized = lambda name: q4_1 if name.startswith("blk.") and "norm" not in name else None
    write_gguf(path, SHAPE, random_state_dict(SHAPE, seed), quantized_as=quantized)
    return path


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tp-weights")
    return {"a": _write(root / "a.gguf", 0), "b": _write(root / "b.gguf", 1)}


@pytest.fixture(scope="module")
def engine(checkpoints: dict[str, Path]) -> Iterator[Engine]:
    args = {"device": "cpu", "cpu_threads": 1, "max_total_tokens": 512, "log_level": "warning"}
    with Engine(model_path=str(checkpoints["a"]), tp_size=2, **args) as engine:
        yield engine


def _engine_greedy(engine: Engine) -> list[list[int]]:
    params = {"temperature": 0.0, "max_new_tokens": 12, "ignore_eos": True}
    return [out["output_ids"] for out in engine.generate(input_ids=[list(p) for p in PROMPTS], sampling_params=params)]


def test_tp2_engine_takes_new_weights_on_every_rank(engine: Engine, checkpoints: dict[str, Path]) -> None:
    before = _engine_greedy(engine)
    expected = greedy_tokens(scheduler_on(checkpoints["b"]))
    assert before != expected
    success, message, paused = engine.update_weights_from_disk(str(checkpoints["b"]))
    assert success and paused == 0, message
    assert _engine_greedy(engine) == expected
    assert engine.update_weights_from_disk(str(checkpoints["b"]), load_format="dummy")[0] is False


def test_tp2_engine_takes_tensors_on_every_rank(tmp_path: Path) -> None:
    """`update_weights_from_tensor` on a float32 tp=2 engine: whole Hugging Face tensors, each
    rank keeping its slice (q/k/v and gate/up cut by their own splits)."""
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    write_gguf(a, SHAPE, random_state_dict(SHAPE, 0))
    write_gguf(b, SHAPE, random_state_dict(SHAPE, 1))
    args = {"device": "cpu", "cpu_threads": 1, "max_total_tokens": 512, "log_level": "warning"}
    with Engine(model_path=str(a), tp_size=2, **args) as engine:
        success, message = engine.update_weights_from_tensor(list(random_state_dict(SHAPE, 1).items()))
        assert success, message
        assert _engine_greedy(engine) == greedy_tokens(scheduler_on(b))


def test_tp2_weights_read_are_rank_zeros_shard(engine: Engine) -> None:
    rows = engine.get_weights_by_name("model.layers.0.self_attn.v_proj.weight", truncate_size=1000)
    assert rows is not None and len(rows) == SHAPE.kv_heads * SHAPE.head_dim // 2
    assert engine.get_weights_by_name("model.nope") is None
