"""The sampling reference against hand-computed expectations and sampling statistics."""

from __future__ import annotations

import math

import pytest
import torch

from sglang.ops.sampling import (
    SamplingTensors,
    apply_penalties,
    apply_token_bitmask,
    argmax,
    filter_probs,
    log_softmax,
    sample,
)

PROBS = torch.tensor([[0.05, 0.5, 0.15, 0.3]])
"""Sorted descending: 0.5 (id 1), 0.3 (id 3), 0.15 (id 2), 0.05 (id 0)."""


def params(
    batch: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    top_k: int = 1 << 30,
    min_p: float = 0.0,
    generators: list[torch.Generator | None] | None = None,
) -> SamplingTensors:
    return SamplingTensors(
        temperatures=torch.full((batch,), temperature),
        top_ps=torch.full((batch,), top_p),
        top_ks=torch.full((batch,), top_k),
        min_ps=torch.full((batch,), min_p),
        generators=generators or [None] * batch,
    )


def kept(top_k: int = 4, top_p: float = 1.0, min_p: float = 0.0) -> list[int]:
    out = filter_probs(PROBS, torch.tensor([top_k]), torch.tensor([top_p]), torch.tensor([min_p]))
    return sorted(torch.nonzero(out[0]).flatten().tolist())


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        ({"top_k": 2}, [1, 3]),
        ({"top_k": 1}, [1]),
        ({"top_p": 0.7}, [1, 3]),  # 0.5 < 0.7 needs the next token; 0.8 >= 0.7 stops
        ({"top_p": 0.45}, [1]),  # the top token alone exceeds 0.45
        ({"top_p": 0.81}, [1, 2, 3]),
        ({"min_p": 0.5}, [1, 3]),  # threshold 0.25
        ({"min_p": 0.9}, [1]),  # the top token always survives
        ({"top_k": 3, "min_p": 0.4}, [1, 3]),
        ({}, [0, 1, 2, 3]),
    ],
)
def test_filters(filters: dict, expected: list[int]) -> None:
    assert kept(**filters) == expected


def test_filter_keeps_probabilities_of_survivors() -> None:
    out = filter_probs(PROBS, torch.tensor([2]), torch.tensor([1.0]), torch.tensor([0.0]))
    assert torch.equal(out, torch.tensor([[0.0, 0.5, 0.0, 0.3]]))


def test_bitmask_blocks_exactly_the_zero_bits() -> None:
    vocab = 70  # three int32 words, the last one partly used
    allowed = [0, 5, 31, 32, 33, 63, 64, 69]
    bitmask = torch.zeros(1, 3, dtype=torch.int64)
    for token in allowed:
        bitmask[0, token // 32] |= 1 << (token % 32)
    # Token 31 sets the sign bit: the int32 word is negative, as xgrammar's are.
    bitmask = torch.where(bitmask >= 2**31, bitmask - 2**32, bitmask).to(torch.int32)
    logits = torch.randn(1, vocab)
    out = apply_token_bitmask(logits.clone(), bitmask)
    finite = torch.isfinite(out[0]).nonzero().flatten().tolist()
    assert finite == allowed
    assert torch.equal(out[0, allowed], logits[0, allowed])
    assert (out[0, [t for t in range(vocab) if t not in allowed]] == float("-inf")).all()


def test_penalties_by_hand() -> None:
    logits = torch.tensor([[2.0, -1.0, 0.5, 3.0]])
    counts = torch.tensor([[2, 0, 1, 0]])
    seen = torch.tensor([[True, True, True, False]])  # token 1 is in the prompt only
    out = apply_penalties(logits, counts, seen, torch.tensor([0.5]), torch.tensor([0.25]), torch.tensor([2.0]))
    # frequency and presence first (OpenAI), then repetition on every seen token (CTRL).
    token0 = (2.0 - 0.5 * 2 - 0.25) / 2.0
    token1 = -1.0 * 2.0
    token2 = (0.5 - 0.5 * 1 - 0.25) * 2.0  # negative after the additive penalties: multiplied
    torch.testing.assert_close(out, torch.tensor([[token0, token1, token2, 3.0]]))


def test_greedy_fast_path_takes_argmax_and_draws_no_randomness() -> None:
    logits = torch.randn(5, 30)
    state = torch.get_rng_state()
    tokens = sample(logits, params(5, temperature=0.0))
    assert torch.equal(tokens, logits.argmax(-1))
    assert torch.equal(torch.get_rng_state(), state)


def test_greedy_rows_in_a_sampled_batch_stay_greedy() -> None:
    logits = torch.randn(4, 1000)
    p = params(4, temperature=1.0)
    p.temperatures[[0, 2]] = 0.0
    for _ in range(5):
        tokens = sample(logits, p)
        assert torch.equal(tokens[[0, 2]], logits[[0, 2]].argmax(-1))


def test_seeded_rows_reproduce_whatever_shares_the_batch() -> None:
    vocab, steps = 1000, 8
    logits = torch.zeros(3, vocab)  # uniform: every draw is pure generator output

    def run(seed_row: int, other_seed: int, seed: int = 1234) -> list[int]:
        drawn = []
        gens = [torch.Generator().manual_seed(other_seed), None, torch.Generator().manual_seed(other_seed)]
        gens[seed_row] = torch.Generator().manual_seed(seed)
        for _ in range(steps):
            drawn.append(int(sample(logits, params(3, generators=gens))[seed_row]))
        return drawn

    first = run(0, other_seed=7)
    assert run(2, other_seed=99) == first  # other row, other companions, same seed
    assert run(1, other_seed=7) == first  # next to an unseeded row
    assert run(0, other_seed=7, seed=4321) != first


def test_draws_follow_the_filtered_distribution() -> None:
    """The exponential race samples exactly from p: frequencies over 40k rows match to ~1%."""
    probs = torch.tensor([0.1, 0.2, 0.7])
    rows = 40_000
    logits = probs.log().expand(rows, 3)
    torch.manual_seed(0)
    freq = torch.bincount(sample(logits, params(rows)), minlength=3) / rows
    torch.testing.assert_close(freq, probs, atol=0.015, rtol=0)
    freq_top2 = torch.bincount(sample(logits, params(rows, top_k=2)), minlength=3) / rows
    torch.testing.assert_close(freq_top2, torch.tensor([0.0, 2 / 9, 7 / 9]), atol=0.015, rtol=0)
    # Temperature 2 flattens: p^(1/2), renormalized.
    flat = probs.sqrt() / probs.sqrt().sum()
    freq_hot = torch.bincount(sample(logits, params(rows, temperature=2.0)), minlength=3) / rows
    torch.testing.assert_close(freq_hot, flat, atol=0.015, rtol=0)


def test_log_softmax_is_float32_log_probabilities() -> None:
    logits = torch.tensor([[0.0, math.log(3.0)]], dtype=torch.bfloat16)
    out = log_softmax(logits)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, torch.tensor([[math.log(0.25), math.log(0.75)]]), atol=1e-2, rtol=0)


def test_argmax_takes_the_first_maximum_and_a_nan_above_all() -> None:
    nan, inf = float("nan"), float("inf")
    logits = torch.tensor(
        [
            [1.0, 3.0, 2.0, 3.0],  # a tie: the lowest index
            [1.0, nan, inf, nan],  # a NaN beats +inf: the first NaN
            [-inf, -inf, -inf, -inf],  # all masked: index 0
            [-0.0, 0.0, -1.0, 0.0],  # -0.0 == 0.0: a tie
        ]
    )
    out = argmax(logits)
    assert out.dtype == torch.int64
    assert out.tolist() == [1, 1, 0, 0]
