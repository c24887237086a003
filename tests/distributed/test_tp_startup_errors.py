"""Bad tensor-parallel combinations fail at startup with the reason: shapes that do not split
over the ranks (checked while each rank builds its shard), a platform whose distributed
backend this torch lacks, placement flags that contradict each other."""

from __future__ import annotations

import re

import pytest
import torch

from sglang.ci.suites.model_harness import SPECS_BY_NAME, ModelSpec, build_checkpoint
from sglang.ops.collectives import SingleProcessCommunicator
from sglang.platforms.base import PlatformError
from sglang.platforms.cpu.platform import CpuPlatform
from sglang.runtime.distributed.group import TPGroup, using_tp_group
from sglang.runtime.distributed.placement import check_backend, node_placements
from sglang.runtime.layers.sharding import ShardingError
from sglang.runtime.models.config import ModelConfig
from sglang.runtime.models.registry import model_class_for
from sglang.runtime.processes.launch import EngineStartError
from sglang.runtime.server_args import ServerArgs


def _config(**overrides) -> ModelConfig:
    spec = SPECS_BY_NAME["llama"]
    hf = spec.hf_config(**overrides)
    return ModelConfig.from_dict(hf.to_dict())


def _build_rank0(config: ModelConfig, size: int) -> None:
    with using_tp_group(TPGroup(0, size, SingleProcessCommunicator())):
        model_class_for(config)(config, torch.float32)


@pytest.mark.parametrize(
    ("overrides", "size", "reason"),
    [
        ({"vocab_size": 192}, 3, "tensor-parallel size 3 is not a multiple of the number of KV heads (2)"),
        ({"vocab_size": 192, "num_key_value_heads": 4, "intermediate_size": 100}, 3, "intermediate size (100)"),
        ({"vocab_size": 192, "num_key_value_heads": 1, "num_attention_heads": 2}, 4, "attention heads (2)"),
        ({"vocab_size": 127}, 2, "vocabulary size (127) is not divisible by the tensor-parallel size 2"),
    ],
)
def test_shapes_that_do_not_split_fail_with_the_reason(overrides: dict, size: int, reason: str) -> None:
    with pytest.raises(ShardingError, match=re.escape(reason)):
        _build_rank0(_config(**overrides), size)


def test_uneven_gqa_groups_and_replicated_kv_heads_build() -> None:
    _build_rank0(_config(num_attention_heads=6, num_key_value_heads=3, hidden_size=96), 2)
    _build_rank0(_config(num_key_value_heads=1), 2)


def test_platform_without_its_distributed_backend_fails_with_the_reason() -> None:
    class NoBackend(CpuPlatform):
        name = "nobackend"
        distributed_backend = "xla"  # not registered in this torch build

    with pytest.raises(PlatformError, match=r"nobackend platform's distributed backend \(xla\) is not available"):
        check_backend(NoBackend(), 2)
    check_backend(CpuPlatform(), 2)


def test_placement_flags() -> None:
    with pytest.raises(ValueError, match="multiple of nnodes"):
        ServerArgs(tp_size=3, nnodes=2, dist_init_addr="127.0.0.1:1")
    with pytest.raises(ValueError, match="--dist-init-addr"):
        ServerArgs(tp_size=2, nnodes=2)
    with pytest.raises(ValueError, match="node_rank"):
        ServerArgs(tp_size=2, nnodes=2, node_rank=2, dist_init_addr="127.0.0.1:1")
    node1 = node_placements(ServerArgs(tp_size=4, nnodes=2, node_rank=1, dist_init_addr="10.0.0.1:5000"))
    assert [p.rank for p in node1] == [2, 3] and {p.init_method for p in node1} == {"tcp://10.0.0.1:5000"}
    assert node_placements(ServerArgs()) == []


@pytest.mark.slow
def test_engine_start_names_the_reason(tmp_path) -> None:
    """Through the real launcher: both ranks fail to build their shard and the error says why."""
    from sglang.runtime.engine import Engine

    base = SPECS_BY_NAME["llama"]
    spec = ModelSpec("llama-odd-vocab", base.config_cls, base.architecture, {"vocab_size": 127})
    checkpoint = build_checkpoint(spec, tmp_path / "model")
    with pytest.raises(EngineStartError, match=r"vocabulary size \(127\) is not divisible"):
        Engine(model_path=str(checkpoint.path), device="cpu", tp_size=2, cpu_threads=1, max_total_tokens=256)
