"""The tpu runtime's KV slot copies (what the hierarchical cache's storage tier moves pages
through) on torchax tensors over JAX arrays, on XLA:CPU: a read is the slots' values on the
host, a write is functional (a new buffer, the old one untouched) and round-trips bit for bit;
and the storage tier end to end on the tpu platform."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from sglang.ci.suites.schedule_fuzz.fuzz_model import build_fuzz_model
from sglang.platforms.tpu.runtime import TpuRuntime
from sglang.platforms.tpu.torchax_compat import import_torchax
from sglang.runtime.scheduler.process import build_scheduler
from sglang.runtime.server_args import ServerArgs

from ..runtime.runtime_harness import make_request


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


def test_the_host_and_storage_tiers_serve_the_tpu_platform(xla_cpu: None, tmp_path: Path) -> None:
    """A prompt served by one tpu scheduler is served by a fresh one (a restart) from the storage
    tier, and after `flush_cache` empties that one's device pool, from its host tier (a real
    device/host boundary here: JAX arrays): storage's whole blocks, then the host tier's tokens
    (all but the last prompt token) come back as cached tokens, and the greedy output is the same
    every time."""
    model = build_fuzz_model(tmp_path / "model")
    extra = json.dumps({"storage_dir": str(tmp_path / "store"), "block_tokens": 16})
    args = ServerArgs(
        model_path=str(model),
        device="tpu",
        max_total_tokens=512,
        enable_hierarchical_cache=True,
        hicache_storage_backend="file",
        hicache_storage_prefetch_policy="wait_complete",
        hicache_storage_backend_extra_config=extra,
    )

    def serve(scheduler: Any) -> tuple[list[int], dict[str, Any] | None]:
        scheduler.add_request(make_request(list(range(300, 370)), max_new_tokens=6))
        updates = []
        while scheduler.has_work:
            updates += scheduler.step()
        assert scheduler.hicache.flush(10)
        return [t for u in updates for t in u.new_token_ids], updates[-1].meta.cached_tokens_details

    first, _ = build_scheduler(args)
    cold, cold_details = serve(first)
    first.hicache.close(1)
    second, _ = build_scheduler(args)  # a restart on the same folder
    from_storage, storage_details = serve(second)
    assert second.flush_cache()
    from_host, host_details = serve(second)
    second.hicache.close(1)
    assert len(cold) == 6 and from_storage == cold and from_host == cold
    split = {"device": 0, "host": 0, "storage": 0, "storage_backend": "file"}
    assert [cold_details, storage_details, host_details] == [split, split | {"storage": 64}, split | {"host": 69}]
