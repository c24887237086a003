"""The Triton attention backend's graph-capture hooks: a bucket's metadata, handed out once, is
refilled in place by `replay_metadata`, and a forward over it matches the reference.

No graph is captured here (the interpreter has none); what is checked is the contract a captured
step relies on: the tensors `capture_metadata` returned are the only ones the forward reads, so
refilling them for a new batch (padded to the bucket) gives that batch's attention.
"""

from __future__ import annotations

import os

import pytest
import torch

from sglang.ci.suites import mla_cases
from sglang.ci.suites import paged_attention_cases as pac
from sglang.ci.suites.devices import TOLERANCES
from sglang.ops.attention import AttentionInputs, CaptureLimits, ReferenceAttention
from sglang.ops.mla import ReferenceMLA

INTERPRETED = os.environ.get("TRITON_INTERPRET", "") == "1"
DEVICE = torch.device("cpu") if INTERPRETED else torch.device("cuda") if torch.cuda.is_available() else None
pytestmark = pytest.mark.skipif(DEVICE is None, reason="Triton cannot launch here: no GPU and TRITON_INTERPRET!=1")
BUCKET = 8


def _padded(scenario: pac.AttentionScenario | mla_cases.MLAScenario) -> tuple[AttentionInputs, int]:
    """The decode step padded to BUCKET rows of one token in a slot no sequence owns."""
    step = scenario.step
    free = sorted(set(range(scenario.num_slots)) - set(step.kv_slots.tolist()))[0]
    pad = BUCKET - len(step.seq_lens)
    inputs = AttentionInputs(
        seq_lens=(*step.seq_lens, *(1,) * pad),
        extend_lens=(*step.extend_lens, *(1,) * pad),
        kv_slots=torch.cat([step.kv_slots, torch.full((pad,), free)]),
    )
    return inputs, pad


def _pad_rows(x: torch.Tensor, pad: int) -> torch.Tensor:
    return torch.cat([x, torch.zeros(pad, *x.shape[1:], dtype=x.dtype)])


@pytest.mark.parametrize("dtype", (torch.float32, torch.float16), ids=str)
def test_replayed_metadata_matches_reference(dtype: torch.dtype) -> None:
    # Imported here: a machine without triton skips this test instead of failing collection.
    from sglang.platforms.kernels.triton.attention import TritonAttention

    scenarios = [
        pac.build("decode", layer, page, dtype, torch.Generator().manual_seed(seed))
        for seed, (layer, page) in enumerate((("gqa8_window", 16), ("gqa8_window", 1)))
    ]
    first = scenarios[0]
    backend = TritonAttention(first.num_heads, first.num_kv_heads, first.head_dim, dtype, DEVICE)
    limits = CaptureLimits.for_pool(max_batch=BUCKET, num_slots=max(s.num_slots for s in scenarios), max_seq_len=64)
    assert backend.init_capture(limits) is None
    metadata = backend.capture_metadata(BUCKET)
    for scenario in scenarios:
        _, expected, _ = pac.run(ReferenceAttention, scenario)
        kv_buffer = torch.full(backend.kv_buffer_shape(scenario.num_slots), float("nan"), dtype=dtype, device=DEVICE)
        q, k, v = (t.to(DEVICE) for t in scenario.prefix_qkv)
        _, kv_buffer = backend.forward(q, k, v, kv_buffer, backend.plan(scenario.prefix), scenario.layer)
        inputs, pad = _padded(scenario)
        backend.replay_metadata(BUCKET, inputs)
        q, k, v = (_pad_rows(t, pad).to(DEVICE) for t in scenario.step_qkv)
        out, _ = backend.forward(q, k, v, kv_buffer, metadata, scenario.layer)
        torch.testing.assert_close(out[: len(scenario.step.seq_lens)].cpu(), expected, **TOLERANCES[dtype])


def test_mla_replayed_metadata_matches_reference() -> None:
    """The same contract for the Triton MLA backend's decode buckets (float32, two page sizes)."""
    from sglang.platforms.kernels.triton.mla import TritonMLA

    dtype = torch.float32
    scenarios = [
        mla_cases.build("decode", "small", page, dtype, torch.Generator().manual_seed(page)) for page in (16, 1)
    ]
    first = scenarios[0]
    backend = TritonMLA(first.num_heads, first.kv_lora_rank, first.qk_rope_head_dim, dtype, DEVICE)
    limits = CaptureLimits.for_pool(max_batch=BUCKET, num_slots=max(s.num_slots for s in scenarios), max_seq_len=64)
    assert backend.init_capture(limits) is None
    metadata = backend.capture_metadata(BUCKET)
    for scenario in scenarios:
        _, expected, _ = mla_cases.run(ReferenceMLA, scenario)
        weights = (scenario.w_kc.to(DEVICE), scenario.w_vc.to(DEVICE))
        kv_buffer = torch.full(backend.kv_buffer_shape(scenario.num_slots), float("nan"), dtype=dtype, device=DEVICE)
        prefix = (t.to(DEVICE) for t in scenario.prefix_tokens)
        _, kv_buffer = backend.forward(*prefix, *weights, kv_buffer, backend.plan(scenario.prefix), scenario.layer)
        inputs, pad = _padded(scenario)
        backend.replay_metadata(BUCKET, inputs)
        step = (_pad_rows(t, pad).to(DEVICE) for t in scenario.step_tokens)
        out, _ = backend.forward(*step, *weights, kv_buffer, metadata, scenario.layer)
        torch.testing.assert_close(out[: len(scenario.step.seq_lens)].cpu(), expected, **TOLERANCES[dtype])
