"""The tpu runtime's KV slot copies (what the hierarchical cache's storage tier moves pages
through) on torchax tensors over JAX arrays, on XLA:CPU: a read is the slots' values on the
host, a write is functional (a new buffer, the old one untouched) and round-trips bit for bit."""

from __future__ import annotations

import pytest
import torch

from sglang.platforms.tpu.runtime import TpuRuntime
from sglang.platforms.tpu.torchax_compat import import_torchax


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_slots_round_trip_through_the_tpu_runtime(xla_cpu: None, dtype: torch.dtype) -> None:
    import jax

    torchax = import_torchax()
    source = torch.randn(2, 10, 3, 4).to(dtype)
    buffer = torchax.tensor.Tensor(jax.dlpack.from_dlpack(source.contiguous()), torchax.default_env())
    runtime = TpuRuntime()
    slots = torch.tensor([7, 2, 5])
    read = runtime.read_slots(buffer, 1, slots)
    assert read.dtype == dtype and torch.equal(read, source[:, slots])

    values = torch.randn(2, 3, 3, 4).to(dtype)
    written = runtime.write_slots(buffer, 1, torch.tensor([0, 9, 4]), values)
    assert written is not buffer
    assert torch.equal(runtime.read_slots(written, 1, torch.tensor([0, 9, 4])), values)
    assert torch.equal(runtime.read_slots(written, 1, slots), source[:, slots])  # others unchanged
    assert torch.equal(runtime.read_slots(buffer, 1, torch.tensor([0])), source[:, [0]])  # old one intact
