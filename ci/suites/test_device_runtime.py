"""Conformance of each platform's device runtime (part of the op parity suite).

The runtime a platform serves must synchronize, report device memory consistently, release its
cache, and either replay captured work or refuse capture, as its `supports_graphs` says.
"""

from __future__ import annotations

import pytest
import torch

from sglang.ci.suites import devices


@pytest.mark.parametrize("device_name", devices.device_params())
def test_runtime_basics(device_name: str) -> None:
    platform = devices.platform(device_name)
    runtime = platform.runtime
    x = torch.ones(64, device=platform.device()) * 3
    runtime.synchronize()
    info = runtime.memory_info()
    assert 0 < info.free_bytes <= info.total_bytes
    runtime.empty_cache()
    assert float(x.sum()) == 192.0


@pytest.mark.parametrize("device_name", devices.device_params())
def test_graph_capture_matches_declaration(device_name: str) -> None:
    """Capture with static inputs, update them in place, and replay: the output follows."""
    platform = devices.platform(device_name)
    runtime = platform.runtime
    static_in = torch.arange(8.0, device=platform.device())

    def fn() -> torch.Tensor:
        return static_in * 2 + 1

    if not runtime.supports_graphs:
        with pytest.raises(NotImplementedError):
            runtime.capture_graph(fn)
        return
    replay = runtime.capture_graph(fn)
    static_in.copy_(torch.full((8,), 5.0, device=platform.device()))
    out = replay()
    runtime.synchronize()
    assert torch.equal(out.cpu(), torch.full((8,), 11.0))
