"""The paged reference attention against dense attention on unpaged K/V.

The oracle never sees the page table: it rebuilds each sequence's keys and values from the
packed step inputs and runs torch's SDPA (or, with logit soft-capping or sinks, which SDPA
lacks, an explicit float64 softmax whose denominator gains `exp(sink)` per head) under a mask
built position by position. The KV buffer written by the reference must hold every token's K/V
at its slot and leave every other slot untouched.
"""

from __future__ import annotations

import dataclasses
import zlib

import pytest
import torch
import torch.nn.functional as F

from sglang.ci.suites import paged_attention_cases as pac
from sglang.ops.attention import ReferenceAttention


def dense_kv(scenario: pac.AttentionScenario, i: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequence `i`'s keys and values in position order, from the packed step-1 and step-2 inputs."""
    step = scenario.step
    parts_k, parts_v = [], []
    prefix_lens = step.prefix_lens
    if prefix_lens[i]:
        j = sum(1 for p in prefix_lens[:i] if p)  # step 1 packs only the sequences with a prefix
        start = scenario.prefix.q_starts[j]
        parts_k.append(scenario.prefix_qkv[1][start : start + prefix_lens[i]])
        parts_v.append(scenario.prefix_qkv[2][start : start + prefix_lens[i]])
    parts_k.append(scenario.step_qkv[1][step.q_starts[i] : step.q_starts[i + 1]])
    parts_v.append(scenario.step_qkv[2][step.q_starts[i] : step.q_starts[i + 1]])
    return torch.cat(parts_k), torch.cat(parts_v)


def visible(prefix_len: int, new: int, seq_len: int, window: int | None) -> torch.Tensor:
    mask = torch.zeros(new, seq_len, dtype=torch.bool)
    for r in range(new):
        p = prefix_len + r
        for j in range(seq_len):
            mask[r, j] = j <= p and (window is None or p - j < window)
    return mask


def oracle(scenario: pac.AttentionScenario) -> torch.Tensor:
    step, layer = scenario.step, scenario.layer
    group = scenario.num_heads // scenario.num_kv_heads
    outputs = []
    for i, (seq_len, prefix_len) in enumerate(zip(step.seq_lens, step.prefix_lens)):
        q = scenario.step_qkv[0][step.q_starts[i] : step.q_starts[i + 1]]
        k, v = dense_kv(scenario, i)
        mask = visible(prefix_len, q.shape[0], seq_len, layer.sliding_window)
        if layer.logit_softcap is None and scenario.sinks is None:
            out = F.scaled_dot_product_attention(
                q.transpose(0, 1),
                k.transpose(0, 1),
                v.transpose(0, 1),
                attn_mask=mask,
                scale=layer.scale,
                enable_gqa=True,
            ).transpose(0, 1)
        else:
            k64, v64 = (t.double().repeat_interleave(group, dim=1) for t in (k, v))
            scores = torch.einsum("qhd,khd->hqk", q.double(), k64) * layer.scale
            if layer.logit_softcap is not None:
                scores = layer.logit_softcap * torch.tanh(scores / layer.logit_softcap)
            exp_scores = scores.masked_fill(~mask, float("-inf")).exp()
            denominator = exp_scores.sum(-1, keepdim=True)
            if scenario.sinks is not None:
                denominator = denominator + scenario.sinks.double().exp()[:, None, None]
            probs = exp_scores / denominator
            out = torch.einsum("hqk,khd->qhd", probs, v64).float()
        outputs.append(out)
    return torch.cat(outputs)


@pytest.mark.parametrize("page_size", pac.PAGE_SIZES)
@pytest.mark.parametrize("layer", pac.LAYERS)
@pytest.mark.parametrize("scenario_name", pac.SCENARIOS)
def test_reference_matches_dense_oracle(scenario_name: str, layer: str, page_size: int) -> None:
    gen = torch.Generator().manual_seed(zlib.crc32(f"{scenario_name}-{layer}-{page_size}".encode()))
    scenario = pac.build(scenario_name, layer, page_size, torch.float32, gen)
    _, out, kv_buffer = pac.run(ReferenceAttention, scenario)
    torch.testing.assert_close(out, oracle(scenario), atol=1e-5, rtol=1e-5)

    expected_buffer = torch.full_like(kv_buffer, float("nan"))
    step = scenario.step
    for i in range(len(step.seq_lens)):
        slots = step.kv_slots[step.kv_starts[i] : step.kv_starts[i + 1]]
        expected_buffer[0, slots], expected_buffer[1, slots] = dense_kv(scenario, i)
    torch.testing.assert_close(kv_buffer, expected_buffer, rtol=0, atol=0, equal_nan=True)


def test_oracle_notices_a_wrong_window() -> None:
    """The comparison is sharp enough to see a one-position error in the sliding window."""
    scenario = pac.build("decode", "gqa_window", 16, torch.float32, torch.Generator().manual_seed(0))
    _, out, _ = pac.run(ReferenceAttention, scenario)
    wider_layer = dataclasses.replace(scenario.layer, sliding_window=scenario.layer.sliding_window + 1)
    wider = dataclasses.replace(scenario, layer=wider_layer)
    assert not torch.allclose(out, oracle(wider), atol=1e-3)
