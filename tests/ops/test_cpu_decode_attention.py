"""cpu_cpp's decode attention over long contexts: a row's tokens are split into chunks, one task
per KV head and chunk, whose partial softmaxes are merged. Rows of one chunk and of several, with
a sliding window across chunk boundaries, soft-capping and sinks, give what torch_native's SDPA
gives; and a row's output is the same bits alone as in any batch (the chunks are fixed lengths).
Over a bfloat16 pool (`--kv-cache-dtype bf16`) the kernel stores and reads what torch_native does.

Most of the op parity suite's scenarios are shorter than one chunk; these are not.
"""

from __future__ import annotations

import pytest
import torch

from sglang.ops.attention import AttentionInputs, AttentionLayer
from sglang.platforms.kernels.cpu_cpp.attention import PoolDecodeAttention
from sglang.platforms.kernels.torch_native.attention import SdpaAttention

SLOTS = 4096
# One token, one chunk exactly (64), one token past it, and several chunks with a short last one.
SEQ_LENS = (1, 63, 64, 65, 300, 1000)
LAYERS = {
    # name: (query heads, KV heads, head dim, sliding window, softcap, sinks)
    "gqa3_d64": (9, 3, 64, None, None, False),  # the embedded model's shape
    "window_across_chunks": (4, 2, 64, 200, None, False),
    "softcap": (4, 1, 32, None, 30.0, False),
    "sinks_d80": (4, 2, 80, 150, None, True),
}


def decode_step(seq_lens: tuple[int, ...]) -> AttentionInputs:
    slots = torch.randperm(SLOTS, generator=torch.Generator().manual_seed(0))[: sum(seq_lens)]
    return AttentionInputs(seq_lens, (1,) * len(seq_lens), slots)


def attend(
    cls: type,
    layer_name: str,
    step: AttentionInputs,
    rows: slice = slice(None),
    kv_dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The outputs of the step's decode rows (`rows` of the queries and new K/V drawn for
    `SEQ_LENS`), the pool after the step, and the new K rows."""
    heads, kv_heads, dim, window, softcap, with_sinks = LAYERS[layer_name]
    gen = torch.Generator().manual_seed(1)
    # Scaled up so the softmaxes are peaked, as trained models' are, not nearly uniform.
    q = 4 * torch.randn(len(SEQ_LENS), heads, dim, generator=gen)[rows]
    k, v = (torch.randn(len(SEQ_LENS), kv_heads, dim, generator=gen)[rows] for _ in range(2))
    sinks = torch.randn(heads, generator=gen) if with_sinks else None
    layer = AttentionLayer(layer_id=0, scale=dim**-0.5, sliding_window=window, logit_softcap=softcap, sinks=with_sinks)
    backend = cls(heads, kv_heads, dim, torch.float32, torch.device("cpu"))
    backend.kv_dtype = kv_dtype
    kv = torch.randn(backend.kv_buffer_shape(SLOTS), generator=torch.Generator().manual_seed(2)).to(kv_dtype)
    out, kv = backend.forward(q, k, v, kv, backend.plan(step), layer, sinks)
    return out, kv, k


@pytest.mark.parametrize("layer_name", list(LAYERS))
def test_long_decode_rows_match_torch_native(layer_name: str) -> None:
    step = decode_step(SEQ_LENS)
    expected = attend(SdpaAttention, layer_name, step)[0]
    actual = attend(PoolDecodeAttention, layer_name, step)[0]
    torch.testing.assert_close(actual, expected, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("layer_name", list(LAYERS))
def test_bfloat16_pool_matches_torch_native(layer_name: str) -> None:
    step = decode_step(SEQ_LENS)
    expected, expected_pool, new_keys = attend(SdpaAttention, layer_name, step, kv_dtype=torch.bfloat16)
    actual, actual_pool, _ = attend(PoolDecodeAttention, layer_name, step, kv_dtype=torch.bfloat16)
    # The new rows are stored as torch rounds them (to nearest even), and read back the same.
    new_slots = step.new_slots()
    assert torch.equal(actual_pool[0, new_slots], new_keys.to(torch.bfloat16))
    assert torch.equal(actual_pool, expected_pool)
    torch.testing.assert_close(actual, expected, atol=2e-5, rtol=1e-5)
    # Against a float32 pool: the bfloat16 rounding of K and V only.
    full = attend(PoolDecodeAttention, layer_name, step)[0]
    assert 0 < (actual - full).abs().max() < 0.1


def test_a_rows_output_does_not_depend_on_the_batch() -> None:
    step = decode_step(SEQ_LENS)
    batch = attend(PoolDecodeAttention, "gqa3_d64", step)[0]
    starts = step.kv_starts
    for row, seq_len in enumerate(SEQ_LENS):
        alone = AttentionInputs((seq_len,), (1,), step.kv_slots[starts[row] : starts[row + 1]])
        out = attend(PoolDecodeAttention, "gqa3_d64", alone, slice(row, row + 1))[0]
        assert torch.equal(out[0], batch[row]), seq_len
