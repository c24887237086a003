"""Tensor parallelism on accelerators: each rank on a node takes its own device, and the KV pool
is sized from that device's memory.

Before issue 29 `Platform.device()` was index 0 for every rank and nothing made a rank's device
current, so `--tp-size 2` put both ranks on device 0 (collective init fails, memory counted
twice). Without the devices here each torch device module is a recorder: this checks the wiring
(which index, made current before anything is sized), not a device.
"""

from __future__ import annotations

import sys
import types

import pytest
import torch

from sglang.platforms import PlatformError, platform_class
from sglang.runtime.distributed.placement import node_placements
from sglang.runtime.server_args import ServerArgs

MODULES = {"cuda": "cuda", "rocm": "cuda", "xpu": "xpu", "npu": "npu"}
GIB = 1 << 30


def recording_module(count: int) -> types.SimpleNamespace:
    """Device `i` has `i + 1` GiB free; `mem_get_info` answers for the current device."""
    state = types.SimpleNamespace(current=0, set_calls=[])

    def set_device(index: int) -> None:
        state.set_calls.append(index)
        state.current = index

    return types.SimpleNamespace(
        state=state,
        device_count=lambda: count,
        set_device=set_device,
        mem_get_info=lambda: ((state.current + 1) * GIB, 80 * GIB),
    )


@pytest.fixture
def fake_devices(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_npu", types.ModuleType("torch_npu"))  # NpuRuntime imports it

    def install(name: str, count: int) -> types.SimpleNamespace:
        module = recording_module(count)
        monkeypatch.setattr(torch, MODULES[name], module, raising=False)
        return module.state

    return install


@pytest.mark.parametrize("name", list(MODULES))
def test_each_local_rank_takes_its_own_device(name: str, fake_devices) -> None:
    state = fake_devices(name, count=2)
    args = ServerArgs(tp_size=4, nnodes=2, node_rank=1, dist_init_addr="127.0.0.1:29500")
    placements = node_placements(args)
    assert [(p.rank, p.local_rank) for p in placements] == [(2, 0), (3, 1)]
    platform = platform_class(name)()
    platform.bind_local_rank(placements[1].local_rank)
    assert platform.device_index == 1
    if name != "npu":  # "npu" is a torch device type only once torch_npu registers it
        assert platform.device() == torch.device(platform.device_type, 1)
    assert state.set_calls == [1]
    assert platform.runtime.memory_info().free_bytes == 2 * GIB, "KV sized from this rank's device"


@pytest.mark.parametrize("name", list(MODULES))
def test_a_rank_without_a_device_fails_with_the_hint(name: str, fake_devices, monkeypatch) -> None:
    fake_devices(name, count=1)
    platform = platform_class(name)()
    monkeypatch.setenv(platform.visible_devices_env, "0")
    expected = f"local rank 1 needs device 1, but 1 visible.*{platform.visible_devices_env}"
    with pytest.raises(PlatformError, match=expected):
        platform.bind_local_rank(1)


def test_host_platforms_share_one_device() -> None:
    cpu = platform_class("cpu")()
    cpu.bind_local_rank(3)
    assert cpu.device() == torch.device("cpu", 0)


def test_join_takes_the_device_before_the_collectives(fake_devices, monkeypatch) -> None:
    """`join` (the rank's first act in `build_runner`, before the model loads and the KV pool is
    sized) binds the local rank's device, then joins the group: the collective backend binds to
    the current device. Without the bind here every rank would stay on device 0."""
    from sglang.runtime.distributed import placement as placement_module
    from sglang.runtime.distributed.group import using_tp_group

    state = fake_devices("cuda", count=2)
    platform = platform_class("cuda")()
    joined_on = []
    monkeypatch.setattr(placement_module, "check_backend", lambda platform, tp_size: None)
    monkeypatch.setattr(platform, "init_distributed", lambda rank, *rest: joined_on.append((rank, state.current)))
    args = ServerArgs(tp_size=4, nnodes=2, node_rank=1, dist_init_addr="127.0.0.1:29500")
    with using_tp_group(placement_module.SINGLE):
        group = placement_module.join(platform, node_placements(args)[1])
    assert joined_on == [(3, 1)], "rank 3 joins with device 1 current"
    assert group.rank == 3 and platform.device_index == 1
