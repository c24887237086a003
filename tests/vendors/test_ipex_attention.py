"""The ipex family's paged attention against the recording IPEX stand-in, on cpu.

These check our side of IPEX's contract: the KV layout the backend declares and writes, the
block table and context lengths it derives from the token-level slots, which kernel each step
and layer reaches, the packed offsets of extends, and the fallback where the GPU lacks 2D block
loads. Outputs are compared with our reference each time. Op parity over every paged-attention
case runs in `test_vendor_parity`; none of this says anything about IPEX's kernels or a device.
"""

from __future__ import annotations

import pytest
import torch

from sglang.ci.suites import paged_attention_cases as pac
from sglang.ci.suites.devices import assert_close
from sglang.ops.attention import AttentionInputs, AttentionLayer, ReferenceAttention
from sglang.ops.binding import load
from sglang.platforms.kernels.registry import family

from . import xpu_standin
from .standin import Recorder, installed

PACKAGE = "sglang.platforms.kernels.ipex"
REFERENCE_CALLS = ("PagedAttention.reshape_and_cache",)


def _backend_class(monkeypatch: pytest.MonkeyPatch, recorder: Recorder, has_2d_block_array: bool = True) -> type:
    candidate = next(c for c in family("ipex").candidates if c.op == "attention_backend")
    with installed(monkeypatch, xpu_standin.build(recorder, has_2d_block_array), PACKAGE):
        return load(candidate)


def _paged(backend_cls: type, page_size: int):
    def build(*args):
        backend = backend_cls(*args)
        backend.page_size = page_size
        return backend

    return build


def _run(monkeypatch, scenario: str, layer: str, page_size: int = 16, has_2d_block_array: bool = True):
    """Runs the scenario's two steps through the adapter; checks both outputs against the
    reference and hands back (scenario, recorder, KV buffer)."""
    recorder = Recorder()
    built = pac.build(scenario, layer, page_size, torch.bfloat16, torch.Generator().manual_seed(7))
    backend_cls = _backend_class(monkeypatch, recorder, has_2d_block_array)
    first, second, kv_buffer = pac.run(_paged(backend_cls, page_size), built)
    expected = pac.run(ReferenceAttention, built)
    assert_close((first, second), expected[:2], torch.bfloat16, "attention")
    return built, recorder, kv_buffer


def _pages(inputs: AttentionInputs, row: int, page_size: int) -> list[int]:
    starts = inputs.kv_starts
    return (inputs.kv_slots[starts[row] : starts[row + 1]][::page_size] // page_size).tolist()


def test_declares_the_decode_kernels_layout(monkeypatch) -> None:
    backend = _backend_class(monkeypatch, Recorder())(6, 2, 64, torch.bfloat16, torch.device("cpu"))
    backend.page_size = 16
    assert backend.kv_buffer_shape(64) == (2, 4, 2, 64, 16)
    assert backend.kv_bytes_per_token() == 2 * 2 * 64 * 2
    with pytest.raises(ValueError, match="whole pages"):
        backend.kv_buffer_shape(40)


@pytest.mark.parametrize("page_size", [16, 32])
def test_decode_reads_a_block_table_derived_from_the_slots(monkeypatch, page_size: int) -> None:
    scenario, recorder, _ = _run(monkeypatch, "decode", "gqa", page_size)
    step = scenario.step
    # Step 1 prefills the prefixes (varlen), step 2 decodes through the paged kernel.
    assert recorder.names() == [
        "PagedAttention.reshape_and_cache",
        "llm.functional.varlen_attention",
        "PagedAttention.reshape_and_cache",
        "PagedAttention.single_query_kv_attention",
    ]
    call = recorder.last("PagedAttention.single_query_kv_attention")
    table = call["block_tables"]
    widest = max(-(-s // page_size) for s in step.seq_lens)
    assert table.shape == (len(step.seq_lens), widest)
    for row in range(len(step.seq_lens)):
        pages = _pages(step, row, page_size)
        assert table[row, : len(pages)].tolist() == pages
        assert not table[row, len(pages) :].any(), "padding is block 0"
    assert call["context_lens"] == list(step.seq_lens)
    assert call["max_context_len"] == max(step.seq_lens)
    assert call["num_queries_per_tokens"] == scenario.num_heads // scenario.num_kv_heads
    write = recorder.last("PagedAttention.reshape_and_cache")
    assert write["slots"] == step.new_slots().tolist()
    assert (write["x"], write["block_size"]) == (1, page_size)


def test_writes_land_in_the_declared_layout(monkeypatch) -> None:
    """Token `s`'s key sits at `[0, s // P, :, :, s % P]`: what the decode kernel reads."""
    scenario, _, kv_buffer = _run(monkeypatch, "cached_prefix", "gqa")
    _, k, v = scenario.step_qkv
    slots = scenario.step.new_slots()
    assert kv_buffer.shape == (2, scenario.num_slots // 16, scenario.num_kv_heads, scenario.head_dim, 16)
    assert torch.equal(kv_buffer[0][slots // 16, :, :, slots % 16], k)
    assert torch.equal(kv_buffer[1][slots // 16, :, :, slots % 16], v)


def test_extend_packs_every_row_with_its_prefix(monkeypatch) -> None:
    scenario, recorder, _ = _run(monkeypatch, "cached_prefix", "gqa")
    step = scenario.step
    call = recorder.last("llm.functional.varlen_attention")
    assert call["q_offsets"] == list(step.q_starts)
    assert call["k_offsets"] == list(step.kv_starts)
    assert (call["window"], call["softcap"]) == ((-1, -1), -1.0)
    assert "PagedAttention.single_query_kv_attention" not in recorder.names()


def test_rows_without_new_tokens_are_left_out(monkeypatch) -> None:
    """A row that only holds cached tokens owns no query rows: it is not packed at all."""
    recorder = Recorder()
    backend = _backend_class(monkeypatch, recorder)(2, 1, 16, torch.bfloat16, torch.device("cpu"))
    backend.page_size = 16
    kv_buffer = torch.randn(backend.kv_buffer_shape(48)).to(torch.bfloat16)
    inputs = AttentionInputs(seq_lens=(5, 3), extend_lens=(0, 3), kv_slots=torch.tensor([0, 1, 2, 3, 4, 32, 33, 34]))
    q, k, v = (torch.randn(3, heads, 16).to(torch.bfloat16) for heads in (2, 1, 1))
    layer = AttentionLayer(layer_id=0, scale=0.25)
    out, _ = backend.forward(q, k, v, kv_buffer, backend.plan(inputs), layer)
    call = recorder.last("llm.functional.varlen_attention")
    assert (call["q_offsets"], call["k_offsets"]) == ([0, 3], [0, 3])
    # Row 1 alone: its three new tokens attend causally among themselves.
    reference = ReferenceAttention(2, 1, 16, torch.bfloat16, torch.device("cpu"))
    alone = AttentionInputs(seq_lens=(3,), extend_lens=(3,), kv_slots=torch.arange(3))
    kv = torch.zeros(2, 3, 1, 16, dtype=torch.bfloat16)
    expected, _ = reference.forward(q, k, v, kv, reference.plan(alone), layer)
    assert_close(out, expected, torch.bfloat16, "attention")


@pytest.mark.parametrize(("layer", "window", "softcap"), [("gqa_window", (3, 0), -1.0), ("softcap", (-1, -1), 1.0)])
def test_windowed_and_capped_layers_skip_the_decode_kernel(monkeypatch, layer, window, softcap) -> None:
    """The decode kernel takes no window and may drop the soft-cap: such decodes go varlen."""
    _, recorder, _ = _run(monkeypatch, "decode", layer)
    assert "PagedAttention.single_query_kv_attention" not in recorder.names()
    call = recorder.last("llm.functional.varlen_attention")
    assert (call["window"], call["softcap"]) == (window, softcap)


@pytest.mark.parametrize("layer", ["gqa_window", "softcap"])
def test_without_2d_block_loads_masked_layers_take_the_reference(monkeypatch, layer: str) -> None:
    """IPEX's varlen path there ignores windows and soft-caps (the stand-in does the same), so
    the adapter must not hand it such layers: only the cache writes reach IPEX."""
    _, recorder, _ = _run(monkeypatch, "mixed", layer, has_2d_block_array=False)
    assert set(recorder.names()) == set(REFERENCE_CALLS)


def test_without_2d_block_loads_plain_layers_still_go_varlen(monkeypatch) -> None:
    _, recorder, _ = _run(monkeypatch, "mixed", "gqa", has_2d_block_array=False)
    assert recorder.names().count("llm.functional.varlen_attention") == 2
