"""Parity cases: for every op, inputs of several shapes and how to call and compare it.

A case's `make` draws fresh inputs on the oracle device from a seeded generator; `call` applies
an implementation (a function, or a class for `attention_backend`); `check` compares a device's
outputs with the reference's. Inputs are drawn so that the comparison is well defined: routing
logits have no ties, and sampled rows are compared only where the result is deterministic.
argmax's ties and NaNs are drawn on purpose: which index wins them is part of its contract.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from sglang.ci.suites import mla_cases
from sglang.ci.suites import paged_attention_cases as pac
from sglang.ci.suites.devices import assert_close
from sglang.ops.rotary import RopeScaling, RotaryTable
from sglang.ops.sampling import SamplingTensors, filter_probs

Make = Callable[[torch.Generator, torch.dtype], tuple]


def _call(impl: Any, args: tuple) -> Any:
    return impl(*args)


def _check(actual: Any, expected: Any, args: tuple, dtype: torch.dtype) -> None:
    assert_close(actual, expected, dtype)


@dataclass(frozen=True)
class OpCase:
    op: str
    name: str
    make: Make
    call: Callable[[Any, tuple], Any] = _call
    check: Callable[[Any, Any, tuple, torch.dtype], None] = _check
    page_size: int | None = None
    attention_shape: tuple[int, int, int] | None = None
    """(query heads, KV heads, head dim) of attention cases: what candidates' requirements see."""
    features: frozenset[str] = frozenset()
    """The model features the case needs (`sinks`): candidates that do not serve them are skipped
    with their declared reason."""

    @property
    def id(self) -> str:
        return f"{self.op}-{self.name}"


def randn(gen: torch.Generator, *shape: int, dtype: torch.dtype = torch.float32, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape, generator=gen) * scale).to(dtype)


def distinct_logits(gen: torch.Generator, rows: int, cols: int, dtype: torch.dtype) -> torch.Tensor:
    """Per row a shuffle of `k / 4`: exact in bf16 and tie-free, so top-k is unambiguous."""
    return torch.stack([torch.randperm(cols, generator=gen) for _ in range(rows)]).to(dtype) / 4


LINEAR_ROPE = RopeScaling(kind="linear", factor=2.0)


def _rotary(
    tokens: int, heads: int, kv_heads: int, dim: int, rotary_dim: int, neox: bool, scaling: RopeScaling = LINEAR_ROPE
) -> Make:
    table = RotaryTable.build(rotary_dim, 64, 10000.0, scaling).cos_sin

    def make(gen, dtype):
        positions = torch.randint(0, 64, (tokens,), generator=gen)
        return (
            positions,
            randn(gen, tokens, heads, dim, dtype=dtype),
            randn(gen, tokens, kv_heads, dim, dtype=dtype),
            table,
            neox,
        )

    return make


def _moe_experts(
    tokens: int, experts: int, hidden: int, inter: int, top_k: int, act: str, biased: bool = False
) -> Make:
    """With `biased`, the experts' biases too, and gate/up projections three times larger, so
    that the clamped SwiGLU's limits bind on some entries (the down projection eight times
    smaller, keeping outputs of order one for the half-precision tolerances)."""

    def make(gen, dtype):
        weights, ids = distinct_logits(gen, tokens, experts, torch.float32).softmax(-1).topk(top_k, dim=-1)
        args = (
            randn(gen, tokens, hidden, dtype=dtype),
            randn(gen, experts, 2 * inter, hidden, dtype=dtype, scale=(3 if biased else 1) * hidden**-0.5),
            randn(gen, experts, hidden, inter, dtype=dtype, scale=(0.125 if biased else 1) * inter**-0.5),
            weights / weights.sum(-1, keepdim=True),
            ids,
            act,
        )
        if biased:
            args += (randn(gen, experts, 2 * inter, dtype=dtype), randn(gen, experts, hidden, dtype=dtype))
        return args

    return make


def _check_route(actual, expected, args, dtype) -> None:
    """Expert order within a row is free: compare after sorting each row by expert id."""

    def by_expert(weights, ids):
        ids, order = ids.cpu().sort(dim=-1)
        return weights.cpu().gather(1, order), ids

    assert_close(by_expert(*actual), by_expert(*expected), dtype, "moe_route")


def _sample_args(gen: torch.Generator, dtype: torch.dtype) -> tuple:
    # Rows: greedy, greedy, top-k 1 at temperature 1, then three stochastic rows.
    logits = randn(gen, 6, 50, dtype=dtype, scale=3.0)
    params = SamplingTensors(
        temperatures=torch.tensor([0.0, 0.0, 1.0, 0.7, 1.3, 1.0]),
        top_ps=torch.tensor([1.0, 0.5, 1.0, 0.9, 1.0, 0.6]),
        top_ks=torch.tensor([50, 5, 1, 10, 50, 3]),
        min_ps=torch.tensor([0.0, 0.0, 0.0, 0.05, 0.1, 0.0]),
        generators=[None] * 6,
    )
    return logits, params


def _check_sample(actual, expected, args, dtype) -> None:
    """Deterministic rows must match; every drawn token must survive the reference's filters."""
    logits, params = args
    actual = actual.cpu()
    fixed = (params.temperatures == 0) | (params.top_ks == 1)
    assert torch.equal(actual[fixed], expected[fixed]), f"deterministic rows differ: {actual} vs {expected}"
    probs = (logits.float() / params.temperatures.clamp(min=1e-6)[:, None]).softmax(-1)
    allowed = filter_probs(probs, params.top_ks, params.top_ps, params.min_ps) > 0
    assert allowed[torch.arange(len(actual)), actual].all(), f"a drawn token was filtered out: {actual}"


def _check_argmax(actual, expected, args, dtype) -> None:
    """Indices exactly: a greedy token that differs is another output, however close the values."""
    actual = actual.cpu()
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, f"{actual.dtype} {actual.shape}"
    differ = (actual != expected).nonzero().flatten()
    assert not differ.numel(), f"rows {differ.tolist()}: {actual[differ].tolist()} vs {expected[differ].tolist()}"


def _argmax_ties(gen: torch.Generator, dtype: torch.dtype) -> tuple:
    """Small integers: each row's maximum occurs dozens of times (the lowest index must win); the
    last row is one value throughout (index 0)."""
    logits = torch.randint(-8, 8, (4, 1000), generator=gen).to(dtype)
    logits[3] = 1.5
    return (logits,)


def _argmax_nan(gen: torch.Generator, dtype: torch.dtype) -> tuple:
    """A NaN counts as the largest value, so each row's first NaN wins: two NaNs in a row, a NaN
    after a +inf, a NaN among the last values (past a vector kernel's full blocks), one at index 0."""
    logits = randn(gen, 4, 1000, dtype=dtype)
    logits[0, [317, 45]] = float("nan")
    logits[1, 12], logits[1, 600] = float("inf"), float("nan")
    logits[2, 997] = float("nan")
    logits[3, [0, 500]] = float("nan")
    return (logits,)


def _argmax_masked(gen: torch.Generator, dtype: torch.dtype) -> tuple:
    """Rows a grammar masked: all -inf (index 0), and all -inf but one allowed token."""
    logits = torch.full((2, 1000), float("-inf"), dtype=dtype)
    logits[1, int(torch.randint(0, 1000, (1,), generator=gen))] = -3.0
    return (logits,)


def _penalties(batch: int, vocab: int) -> Make:
    def make(gen, dtype):
        counts = torch.randint(0, 3, (batch, vocab), generator=gen)
        seen = (counts > 0) | (torch.rand(batch, vocab, generator=gen) < 0.2)
        return (
            randn(gen, batch, vocab, dtype=dtype, scale=2.0),
            counts,
            seen,
            torch.rand(batch, generator=gen).to(dtype),
            torch.rand(batch, generator=gen).to(dtype),
            (1 + torch.rand(batch, generator=gen)).to(dtype),
        )

    return make


def _store_kv(slots_total: int, tokens: int, kv_heads: int, dim: int) -> Make:
    def make(gen, dtype):
        buffer = randn(gen, 2, slots_total, kv_heads, dim, dtype=dtype)
        slots = torch.randperm(slots_total, generator=gen)[:tokens]
        return (
            buffer,
            slots,
            randn(gen, tokens, kv_heads, dim, dtype=dtype),
            randn(gen, tokens, kv_heads, dim, dtype=dtype),
        )

    return make


def _lora_batch(gen: torch.Generator, segments: tuple[tuple[int, int], ...], slots: int, ranks: tuple[int, ...]):
    """Per-token slots of `segments` ((rows, slot) pairs), and per slot the rank actually used:
    slot 0 is the base model's (no adapter: zero rank, zero scaling), slot `i` has `ranks[i - 1]`
    (rows and columns past it zero, as the slot pool pads a smaller adapter)."""
    token_slots = torch.cat([torch.full((rows,), slot, dtype=torch.long) for rows, slot in segments])
    scaling = torch.cat([torch.zeros(1), torch.rand(slots - 1, generator=gen) + 0.5])
    used = (0, *ranks)
    return token_slots, scaling, used


def _lora_shrink(segments, slots: int, hidden: int, parts: int, ranks: tuple[int, ...]) -> Make:
    rank = max(ranks)

    def make(gen, dtype):
        token_slots, _, used = _lora_batch(gen, segments, slots, ranks)
        a = randn(gen, slots, parts, rank, hidden, dtype=dtype, scale=hidden**-0.5)
        for slot, r in enumerate(used):
            a[slot, :, r:] = 0
        return randn(gen, len(token_slots), hidden, dtype=dtype), a.flatten(1, 2), token_slots

    return make


def _lora_expand(segments, slots: int, widths: tuple[int, ...], ranks: tuple[int, ...]) -> Make:
    rank = max(ranks)

    def make(gen, dtype):
        token_slots, scaling, used = _lora_batch(gen, segments, slots, ranks)
        b = randn(gen, slots, sum(widths), rank, dtype=dtype, scale=rank**-0.5)
        for slot, r in enumerate(used):
            b[slot, :, r:] = 0
        rows = len(token_slots)
        h = randn(gen, rows, len(widths) * rank, dtype=dtype)
        return randn(gen, rows, sum(widths), dtype=dtype), h, b, token_slots, scaling, widths

    return make


# A mixed batch [base, a, b, a, c] (prefill-like segments) and a decode batch of one row each.
_LORA_PREFILL = ((3, 0), (5, 1), (2, 2), (1, 1), (4, 3))
_LORA_DECODE = ((1, 2), (1, 0), (1, 3))
# Over 64 rows: the cpu_cpp shrink's per-slot GEMM path (slot 2 unused, slot 0 zero scaling).
_LORA_LONG_PREFILL = ((29, 1), (17, 0), (12, 3), (15, 1))


def _check_attention(actual, expected, args, dtype) -> None:
    """Both steps' outputs must match. The KV buffers are compared too when the backend keeps the
    reference layout; with another layout the outputs still cover the writes, because step 2
    reads every K/V step 1 wrote and each new token attends to its own."""
    assert_close(actual[:2], expected[:2], dtype, "attention")
    if actual[2].shape == expected[2].shape:
        assert_close(actual[2], expected[2], dtype, "kv_buffer")


def _attention(scenario: str, layer: str, page_size: int) -> OpCase:
    return OpCase(
        op="attention_backend",
        name=f"{scenario}-{layer}-page{page_size}",
        make=lambda gen, dtype: (pac.build(scenario, layer, page_size, dtype, gen),),
        call=lambda backend_cls, args: pac.run(backend_cls, *args),
        check=_check_attention,
        page_size=page_size,
        attention_shape=pac.LAYERS[layer][:3],
        features=frozenset({"sinks"}) if layer in pac.SINK_LAYERS else frozenset(),
    )


def mla_case(scenario: str, layer: str, page_size: int) -> OpCase:
    """The `mla_backend` parity case of an `mla_cases` scenario, layer and page size."""
    heads, rank, rope_dim = mla_cases.LAYERS[layer][:3]
    return OpCase(
        op="mla_backend",
        name=f"{scenario}-{layer}-page{page_size}",
        make=lambda gen, dtype: (mla_cases.build(scenario, layer, page_size, dtype, gen),),
        call=lambda backend_cls, args: mla_cases.run(backend_cls, *args),
        check=_check_attention,
        page_size=page_size,
        attention_shape=(heads, 1, rank + rope_dim),
    )


CASES: list[OpCase] = [
    *(
        OpCase(
            "embedding",
            f"v{v}h{h}t{t}",
            lambda g, d, v=v, h=h, t=t: (torch.randint(0, v, (t,), generator=g), randn(g, v, h, dtype=d)),
        )
        for v, h, t in ((50, 16, 7), (300, 40, 33))
    ),
    OpCase(
        "linear",
        "bias",
        lambda g, d: (randn(g, 5, 16, dtype=d), randn(g, 24, 16, dtype=d, scale=0.25), randn(g, 24, dtype=d)),
    ),
    OpCase("linear", "no_bias", lambda g, d: (randn(g, 17, 64, dtype=d), randn(g, 8, 64, dtype=d, scale=0.125), None)),
    *(
        OpCase(
            "rms_norm",
            f"{t}x{h}",
            lambda g, d, t=t, h=h: (randn(g, t, h, dtype=d, scale=3.0), 1 + randn(g, h, dtype=d, scale=0.1), 1e-6),
        )
        for t, h in ((3, 64), (17, 96))
    ),
    *(
        OpCase(
            "fused_add_rms_norm",
            f"{t}x{h}",
            lambda g, d, t=t, h=h: (
                randn(g, t, h, dtype=d),
                randn(g, t, h, dtype=d),
                1 + randn(g, h, dtype=d, scale=0.1),
                1e-5,
            ),
        )
        for t, h in ((3, 64), (17, 96))
    ),
    *(
        OpCase(op, f"{t}x{h}", lambda g, d, t=t, h=h: (randn(g, t, 2 * h, dtype=d, scale=2.0),))
        for op in ("silu_and_mul", "gelu_and_mul")
        for t, h in ((4, 32), (9, 56))
    ),
    OpCase("apply_rotary", "neox", _rotary(6, 4, 2, 32, 32, True)),
    OpCase("apply_rotary", "gptj_partial", _rotary(9, 2, 1, 32, 16, False)),
    OpCase(
        "apply_rotary",
        "neox_partial_llama3",
        _rotary(5, 3, 1, 64, 32, True, RopeScaling(kind="llama3", factor=8.0, original_max_position=16)),
    ),
    OpCase("apply_rotary", "gptj_dynamic", _rotary(4, 2, 2, 16, 16, False, RopeScaling(kind="dynamic", factor=2.0))),
    OpCase("store_kv", "scattered", _store_kv(40, 9, 2, 16)),
    OpCase("store_kv", "one_token", _store_kv(8, 1, 1, 32)),
    OpCase(
        "moe_route", "softmax_top2", lambda g, d: (distinct_logits(g, 7, 8, d), 2, "softmax", True), check=_check_route
    ),
    OpCase(
        "moe_route", "sigmoid_top3", lambda g, d: (distinct_logits(g, 5, 6, d), 3, "sigmoid", False), check=_check_route
    ),
    OpCase(
        "moe_route_grouped",
        "e8_g4_top3",
        # 8 experts in 4 groups, the best 2 groups kept, top-3; the bias (multiples of 1/64) only
        # reorders selection, and every sum stays exact in bf16.
        lambda g, d: (distinct_logits(g, 5, 8, d), torch.randperm(8, generator=g).float() / 64, 3, 4, 2, True, 2.5),
        check=_check_route,
    ),
    OpCase(
        "moe_route_group_limited",
        "e8_g4_top3",
        # DeepSeek-V2: softmax scores, the 2 groups with the best expert kept, top-3, scaled.
        lambda g, d: (distinct_logits(g, 5, 8, d), 3, 4, 2, False, 2.5),
        check=_check_route,
    ),
    OpCase("moe_experts", "silu", _moe_experts(5, 4, 16, 24, 2, "silu")),
    OpCase("moe_experts", "gelu_top3", _moe_experts(11, 6, 32, 8, 3, "gelu_pytorch_tanh")),
    # 8 experts, top-2, hidden and intermediate sizes that are not multiples of the GEMM tiles.
    OpCase("moe_experts", "e8_top2", _moe_experts(9, 8, 80, 48, 2, "silu")),
    # Sizes AITER's weight shuffle tiles (rows a multiple of 16, columns of 32).
    OpCase("moe_experts", "e8_top2_tiled", _moe_experts(6, 8, 64, 32, 2, "silu")),
    # gpt-oss: biased experts and the clamped SwiGLU.
    OpCase(
        "moe_experts",
        "biased_swigluoai",
        _moe_experts(7, 4, 32, 16, 2, "swigluoai", biased=True),
        features=frozenset({"expert_bias"}),
    ),
    OpCase("apply_penalties", "3x40", _penalties(3, 40)),
    OpCase(
        "apply_token_bitmask",
        "vocab70",
        lambda g, d: (
            randn(g, 2, 70, dtype=d),
            torch.randint(-(2**31), 2**31 - 1, (2, 3), generator=g, dtype=torch.int32),
        ),
    ),
    OpCase("sample", "mixed_rows", _sample_args, check=_check_sample),
    *(
        OpCase("argmax", f"{b}x{v}", lambda g, d, b=b, v=v: (randn(g, b, v, dtype=d, scale=4.0),), check=_check_argmax)
        for b, v in ((1, 49152), (5, 1000), (3, 37))
    ),
    OpCase("argmax", "ties", _argmax_ties, check=_check_argmax),
    OpCase("argmax", "nan", _argmax_nan, check=_check_argmax),
    OpCase("argmax", "masked", _argmax_masked, check=_check_argmax),
    *(
        OpCase("log_softmax", f"{b}x{v}", lambda g, d, b=b, v=v: (randn(g, b, v, dtype=d, scale=4.0),))
        for b, v in ((4, 50), (2, 1000))
    ),
    *(_attention(s, layer, p) for s, layer, p in pac.CASES),
    *(mla_case(s, layer, p) for s, layer, p in mla_cases.CASES),
    OpCase("lora_shrink", "plain_prefill", _lora_shrink(_LORA_PREFILL, 4, 40, 1, (4, 8, 2))),
    OpCase("lora_shrink", "qkv_decode", _lora_shrink(_LORA_DECODE, 4, 96, 3, (16, 4, 8))),
    OpCase("lora_expand", "plain_prefill", _lora_expand(_LORA_PREFILL, 4, (24,), (4, 8, 2))),
    OpCase("lora_expand", "qkv_prefill", _lora_expand(_LORA_PREFILL, 4, (32, 16, 16), (16, 4, 8))),
    OpCase("lora_expand", "gate_up_decode", _lora_expand(_LORA_DECODE, 4, (72, 72), (8, 8, 3))),
    OpCase("lora_shrink", "qkv_long_prefill", _lora_shrink(_LORA_LONG_PREFILL, 4, 40, 3, (8, 4, 16))),
    OpCase("lora_expand", "qkv_long_prefill", _lora_expand(_LORA_LONG_PREFILL, 4, (32, 16, 16), (8, 4, 16))),
]
"""Every parity case; `device_runtime` is not a numeric op and has its own conformance test."""
