"""cpu_cpp's attention serves short extend rows after a cached prefix in its pool kernel (one
kernel row per new token), the rest with SDPA, and gives what torch_native's SDPA gives.

The op parity suite runs the small shared scenarios; this checks the routing itself and a step
shaped like a restarted server's (questions after a ~100-token cached prefix, beside a decode
row, a fresh prefill and an extend longer than the kernel takes), with and without a window.
"""

from __future__ import annotations

import pytest
import torch

from sglang.ops.attention import AttentionInputs, AttentionLayer
from sglang.platforms.kernels.cpu_cpp.attention import POOL_EXTEND_MAX_TOKENS, PoolDecodeAttention
from sglang.platforms.kernels.torch_native.attention import SdpaAttention

HEADS, KV_HEADS, DIM, SLOTS = 4, 2, 16, 1024
LONG = POOL_EXTEND_MAX_TOKENS + 3
# Rows: a question after a cached prefix, a decode, a prefill from scratch, an extend too long for
# the kernel after a prefix, one more question.
SEQ_LENS = (118, 40, 30, 20 + LONG, 101)
EXTEND_LENS = (18, 1, 30, LONG, 5)


def step() -> AttentionInputs:
    slots = torch.randperm(SLOTS, generator=torch.Generator().manual_seed(0))[: sum(SEQ_LENS)]
    return AttentionInputs(SEQ_LENS, EXTEND_LENS, slots)


def test_short_extends_after_a_prefix_are_kernel_rows_and_the_rest_sdpa_rows() -> None:
    backend = PoolDecodeAttention(HEADS, KV_HEADS, DIM, torch.float32, torch.device("cpu"))
    meta = backend.plan(step())
    assert meta.extend_rows == (2, 3)  # the prefill from scratch and the long extend
    assert meta.decode_rows.tolist() == [0, 1, 4]
    q_starts = step().q_starts
    assert meta.decode_q_index.tolist() == [*range(0, 18), 18, *range(q_starts[4], q_starts[5])]
    # The question's j-th token sees its first 100 + j + 1 slots.
    assert (meta.pool_starts[1:19] - meta.pool_starts[:18]).tolist() == list(range(101, 119))
    assert torch.equal(meta.pool_slots[: meta.pool_starts[18]][-118:], step().kv_slots[:118])


@pytest.mark.parametrize("window", [None, 24])
def test_a_mixed_step_matches_torch_native(window: int | None) -> None:
    gen = torch.Generator().manual_seed(1)
    tokens = sum(EXTEND_LENS)
    q = torch.randn(tokens, HEADS, DIM, generator=gen)
    k, v = (torch.randn(tokens, KV_HEADS, DIM, generator=gen) for _ in range(2))
    layer = AttentionLayer(layer_id=0, scale=DIM**-0.5, sliding_window=window, logit_softcap=None, sinks=False)
    outputs = []
    for cls in (SdpaAttention, PoolDecodeAttention):
        backend = cls(HEADS, KV_HEADS, DIM, torch.float32, torch.device("cpu"))
        kv = torch.randn(backend.kv_buffer_shape(SLOTS), generator=torch.Generator().manual_seed(2))
        out, kv = backend.forward(q, k, v, kv, backend.plan(step()), layer)
        outputs.append((out, kv))
    (expected, expected_kv), (actual, actual_kv) = outputs
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5)
    assert torch.equal(actual_kv, expected_kv)
