"""Quantized weights in the op contract: formats, the reference, and every candidate serving them.

Each candidate that declares a quantized format is compared with the reference (dequantize, then
the dense op). Where a kernel dequantizes in exact float32 arithmetic (as the reference does) they
differ only by the order of the float32 sums: tolerance 1e-5 relative to the output scale. The
cpu_cpp kernels take int16 activations for few rows (`INT16_ACTIVATION_MAX_ROWS`): there the error is
held to the bound that rounding each activation by half its block's step implies.
"""

from __future__ import annotations

import pytest
import torch

from sglang.ops.binding import load, resolve
from sglang.ops.quant import QuantizedWeight, WeightFormat, cat_rows, quantize
from sglang.ops.selection import SelectionContext, ineligibility
from sglang.platforms.base import ModelFacts
from sglang.platforms.cpu.platform import CpuPlatform
from sglang.platforms.kernels.cpu_cpp.linear import INT16_ACTIVATION_MAX_ROWS, tiles
from sglang.platforms.kernels.registry import family

FORMATS = ("int4_g32", "int4_g64", "int4_g128", "int8_g32", "int8_channel")
reference_linear = resolve("sglang.ops.linear:linear")
reference_embedding = resolve("sglang.ops.linear:embedding")


def quantized_candidates(fmt: str) -> list:
    platform = CpuPlatform()
    ctx = SelectionContext(dtype=torch.float32, weight_format=f"dense,{fmt}")
    offered = [c for name in platform.kernel_families for c in platform.family_candidates(name) if c.op == "linear"]
    return [c for c in offered if c.requires.weight_formats and ineligibility(c, ctx) is None]


@pytest.mark.parametrize("fmt", FORMATS)
def test_quantize_round_trip_error_is_within_half_a_step(fmt: str) -> None:
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(24, 256, generator=gen)
    q = quantize(w, WeightFormat.parse(fmt))
    step = q.scales.repeat_interleave(q.group, dim=1)
    assert q.shape == (24, 256)
    assert ((q.dequantize() - w).abs() <= step / 2 + 1e-6).all()


def test_format_names_parse() -> None:
    assert WeightFormat.parse("int4") == WeightFormat(4, 32)
    assert WeightFormat.parse("int8").name == "int8_channel"
    assert WeightFormat.parse("int4_g128").group_size == 128
    with pytest.raises(ValueError):
        WeightFormat.parse("int4_g48")
    with pytest.raises(ValueError):
        WeightFormat.parse("fp8")


def test_rows_and_stacking_keep_every_value() -> None:
    w = quantize(torch.randn(10, 64), WeightFormat(4, 32))
    stacked = cat_rows([w.rows(slice(0, 3)), w.rows(slice(3, 10))])
    assert torch.equal(stacked.dequantize(), w.dequantize())
    ids = torch.tensor([[7, 0], [2, 2]])
    assert torch.equal(reference_embedding(ids, w), torch.nn.functional.embedding(ids, w.dequantize()))


def int16_activation_error_bound(x: torch.Tensor, weight: QuantizedWeight) -> torch.Tensor:
    """Per output, the most that rounding every 32-value block of `x` to steps of
    `max|block| / 32767` can move `x @ W^T`: half a step times the block's `sum |w|`, summed."""
    half_step = x.reshape(-1, x.shape[-1] // 32, 32).abs().amax(-1) / 32767 / 2
    w_abs = weight.dequantize().abs().reshape(weight.shape[0], -1, 32).sum(-1)
    return (half_step @ w_abs.t()).reshape(*x.shape[:-1], weight.shape[0])


def assert_within_the_kernel_error(
    got: torch.Tensor, expected: torch.Tensor, x: torch.Tensor, w: QuantizedWeight, rows: int
) -> None:
    float_error = 1e-5 * expected.abs().max().item()
    if rows <= INT16_ACTIVATION_MAX_ROWS[w.format.bits]:
        excess = (got - expected).abs() - int16_activation_error_bound(x, w) - float_error
        assert excess.max().item() <= 0, f"error over the int16-activation bound by {excess.max().item():.3e}"
    else:
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=float_error)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(
    ("m", "n", "k", "bias"),
    [
        (1, 96, 256, False),
        (3, 30, 128, True),
        (4, 3, 64, False),
        (17, 64, 384, False),
        (5, 64, 384, True),
        (6, 40, 128, False),
        (9, 136, 128, False),  # 18 rows, 34 tiles: several tile chunks, then a 2-row remainder
    ],
)
def test_candidates_match_dequantize_then_dense(fmt: str, m: int, n: int, k: int, bias: bool) -> None:
    fmt_ = WeightFormat.parse(fmt)
    if k % (fmt_.group_size or k):
        pytest.skip(f"{k} features do not split into groups of {fmt_.group_size}")
    gen = torch.Generator().manual_seed(m * n + k)
    w = quantize(torch.randn(n, k, generator=gen), fmt_)
    x = torch.randn(2, m, k, generator=gen)
    b = torch.randn(n, generator=gen) if bias else None
    expected = reference_linear(x, w, b)
    candidates = quantized_candidates(fmt)
    assert candidates, f"no candidate serves {fmt} on cpu"
    for candidate in candidates:
        got = load(candidate)(x, w, b)
        assert got.shape == expected.shape
        assert_within_the_kernel_error(got, expected, x, w, rows=2 * m)


@pytest.mark.parametrize("fmt", ["int4_g32", "int8_channel"])
def test_int16_activations_end_at_the_boundary(fmt: str) -> None:
    """Up to the boundary the output carries int16-activation error; one row more, float32's only.
    576 features (the embedded model's hidden size) are 18 blocks: a per-channel group that is not
    a power of two of them must still take the int16 kernel."""
    gen = torch.Generator().manual_seed(3)
    w = quantize(torch.randn(64, 576, generator=gen), WeightFormat.parse(fmt))
    kernel = load(quantized_candidates(fmt)[0])
    boundary = INT16_ACTIVATION_MAX_ROWS[w.format.bits]
    for rows, int16 in ((boundary, True), (boundary + 1, False)):
        x = torch.randn(rows, 576, generator=gen)
        expected = reference_linear(x, w)
        error = (kernel(x, w) - expected).abs().max().item() / expected.abs().max().item()
        assert (error > 3e-6) == int16, f"{rows} rows: relative error {error:.1e}"


@pytest.mark.parametrize("fmt", ["int4_g32", "int4_g64", "int8_g32"])
def test_float16_exact_scales_take_float16_records(fmt: str) -> None:
    """A GGUF's scales and offsets are float16: the int16 kernel's records then store them in two
    bytes, still exactly (the output stays within the kernel's bound); other weights keep four."""
    gen = torch.Generator().manual_seed(11)
    w = quantize(torch.randn(22, 128, generator=gen), WeightFormat.parse(fmt))
    in_half = QuantizedWeight(
        w.format, w.qdata, w.scales.half().float(), None if w.offsets is None else w.offsets.half().float()
    )
    x = torch.randn(3, 128, generator=gen)
    kernel = load(quantized_candidates(fmt)[0])
    bits, values_per_row = w.format.bits, 1 if w.offsets is None else 2
    for weight, scale_bytes in ((w, 4), (in_half, 2)):
        assert_within_the_kernel_error(kernel(x, weight), reference_linear(x, weight), x, weight, rows=3)
        tiles_of_4_rows, blocks, record_bytes = tiles(weight).shape
        assert (tiles_of_4_rows, blocks) == (6, 4)
        assert record_bytes == 4 * (32 * bits // 8 + values_per_row * scale_bytes)


@pytest.mark.parametrize("fmt", ["int4_g32", "int8_channel"])
@pytest.mark.parametrize(
    ("rows", "split"), [(2, 1), (4, 1), (4, 2), (7, 3), (8, 5), (12, 1), (12, 5), (32, 1), (32, 13), (99, 33), (80, 40)]
)
def test_a_rows_output_does_not_depend_on_the_other_rows(fmt: str, rows: int, split: int) -> None:
    """Within a regime each row's output is bit-for-bit the same whether it comes alone, in a few
    rows or in the whole batch."""
    gen = torch.Generator().manual_seed(5)
    w = quantize(torch.randn(72, 128, generator=gen), WeightFormat.parse(fmt))
    x = torch.randn(rows, 128, generator=gen)
    kernel = load(quantized_candidates(fmt)[0])
    boundary = INT16_ACTIVATION_MAX_ROWS[w.format.bits]
    if (rows <= boundary) != (split <= boundary):
        pytest.skip(f"a {rows}-row call and {split}-row calls take different regimes for {fmt}")
    parts = torch.cat([kernel(x[i : i + split], w) for i in range(0, rows, split)])
    assert torch.equal(parts, kernel(x, w))


@pytest.mark.parametrize("fmt", ["int4_g32", "int8_channel"])
@pytest.mark.parametrize("rows", [1, 3, 8, 9])
def test_the_thread_count_does_not_change_the_bits(fmt: str, rows: int) -> None:
    """Every tile of a call is computed once, by whichever thread takes it: below 9 rows each
    thread streams its own share, then takes chunks from the back of the others' (chunk_queue.h);
    from 9 rows the chunks are queued. Many calls, so a claim that two threads both took or that
    none did (a tile skipped leaves the output's uninitialized memory) shows."""
    gen = torch.Generator().manual_seed(rows)
    w = quantize(torch.randn(2052, 128, generator=gen), WeightFormat.parse(fmt))
    x = torch.randn(rows, 128, generator=gen)
    kernel = load(quantized_candidates(fmt)[0])
    previous = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        expected = kernel(x, w)
        for threads in (2, 3):
            torch.set_num_threads(threads)
            for _ in range(30):
                assert torch.equal(kernel(x, w), expected), f"{threads} threads"
    finally:
        torch.set_num_threads(previous)


@pytest.mark.parametrize("fmt", FORMATS)
def test_no_rows_give_an_empty_output(fmt: str) -> None:
    """A step that needs no logits (max_new_tokens 0) calls lm_head on zero rows."""
    w = quantize(torch.randn(64, 128), WeightFormat.parse(fmt))
    for candidate in quantized_candidates(fmt):
        assert load(candidate)(torch.randn(0, 128), w).shape == (0, 64)


def test_dense_weight_still_served_by_quantized_candidates() -> None:
    x, w = torch.randn(5, 64), torch.randn(8, 64)
    for candidate in quantized_candidates("int4_g32"):
        torch.testing.assert_close(load(candidate)(x, w), x @ w.t())


def test_selection_by_the_models_formats() -> None:
    platform = CpuPlatform()
    quantized = ModelFacts(dtype=torch.float32, weight_format="dense,int4_g32,int8_g32")
    assert platform.select_ops(quantized)["linear"].chosen.family == "cpu_cpp"
    # bfloat16: no kernel computes in it, so the reference (dequantize, then dense) serves.
    bf16 = ModelFacts(dtype=torch.bfloat16, weight_format="dense,int4_g32")
    assert platform.select_ops(bf16)["linear"].chosen.family == "reference"
    odd = SelectionContext(dtype=torch.float32, weight_format="dense,int4_g256")
    reason = ineligibility(family("cpu_cpp").candidates[0], odd)
    assert reason is not None and "int4_g256" in reason


def test_quantized_weight_is_a_typed_value() -> None:
    w = quantize(torch.randn(4, 32), WeightFormat(8, 32))
    assert isinstance(w, QuantizedWeight) and w.offsets is None and w.qdata.dtype == torch.int8


def test_records_made_under_inference_mode_serve_calls_outside_it() -> None:
    """A model loads under inference mode, and its weights' records share memory chunks with
    records built later outside it (a test's, an eager step's). Three weights of 12.6 MB of
    records each open at least one new 32 MiB chunk under inference mode, which the next weight's
    records then come from."""
    kernel = load(quantized_candidates("int4_g32")[0])
    n, k = 8192, 2048
    with torch.inference_mode():
        for _ in range(3):
            loaded = QuantizedWeight(
                WeightFormat(4, 32),
                torch.randint(0, 256, (n, k // 2), dtype=torch.uint8),
                torch.rand(n, k // 32),
                torch.rand(n, k // 32),
            )
            kernel(torch.randn(1, k), loaded)
    w, x = quantize(torch.randn(64, 128), WeightFormat(4, 32)), torch.randn(2, 128)
    assert_within_the_kernel_error(kernel(x, w), reference_linear(x, w), x, w, rows=2)
