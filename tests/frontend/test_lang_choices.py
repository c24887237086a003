"""The three select methods as pure functions of given logprobs."""

from __future__ import annotations

import pytest

import sglang as sgl
from sglang.frontend.choices import normalized_logprob


def entries(*logprobs):
    return [(lp, i, f"t{i}") for i, lp in enumerate(logprobs)]


def decide(method, choices, logprobs, unconditional=None):
    return method(
        choices=choices,
        normalized_prompt_logprobs=[normalized_logprob(t) for t in logprobs],
        input_token_logprobs=logprobs,
        output_token_logprobs=[[] for _ in choices],
        unconditional_token_logprobs=unconditional,
    )


# "cat" starts stronger; "cats and dogs" has the better mean; "dog" is common without the prompt.
CHOICES = ["cat", "cats and dogs", "dog"]
COND = [entries(-0.5, -3.0), entries(-0.6, -0.2, -0.2, -0.2), entries(-1.5)]
UNCOND = [entries(None, -1.0), entries(None, -0.5, -0.5, -0.5), entries(None)]


def test_normalized_logprob_skips_missing_values():
    assert normalized_logprob(entries(None, -1.0, -3.0)) == pytest.approx(-2.0)
    assert normalized_logprob([]) == 0.0


def test_token_length_normalized_picks_the_best_mean():
    d = decide(sgl.token_length_normalized, CHOICES, COND)
    assert d.decision == "cats and dogs"
    assert d.meta_info["normalized_prompt_logprobs"] == pytest.approx([-1.75, -0.3, -1.5])


def test_greedy_token_selection_walks_positions():
    d = decide(sgl.greedy_token_selection, CHOICES, COND)
    assert d.decision == "cat"  # -0.5 wins the first position outright
    # A tie at the first token is broken at the next position, padding short choices with their mean.
    tie = [entries(-0.5), entries(-0.5, -0.1), entries(-0.5, -0.9)]
    d = decide(sgl.greedy_token_selection, ["a", "ab", "ac"], tie)
    assert d.decision == "ab"
    assert d.meta_info["greedy_logprob_matrix"][0] == [-0.5, -0.5]


def test_unconditional_likelihood_normalized_discounts_what_is_likely_anyway():
    d = decide(sgl.unconditional_likelihood_normalized, CHOICES, COND, UNCOND)
    # gains: cat (-1.75 - -0.5) = -1.25, cats and dogs (-0.3 - -0.375) = 0.075, dog (-1.5 - 0) = -1.5
    assert d.decision == "cats and dogs"
    assert d.meta_info["normalized_unconditional_prompt_logprobs"] == pytest.approx([-1.25, 0.075, -1.5])
    assert sgl.unconditional_likelihood_normalized.requires_unconditional_logprobs
    assert not sgl.token_length_normalized.requires_unconditional_logprobs
    with pytest.raises(ValueError):
        decide(sgl.unconditional_likelihood_normalized, CHOICES, COND)


def test_methods_disagree_on_the_same_logprobs():
    cond = [entries(-0.1, -5.0), entries(-1.0, -1.0)]
    uncond = [entries(None, -6.0), entries(None, -0.1)]
    picks = {
        m: decide(m, ["x", "y"], cond, uncond).decision
        for m in (sgl.token_length_normalized, sgl.greedy_token_selection, sgl.unconditional_likelihood_normalized)
    }
    assert picks[sgl.token_length_normalized] == "y"
    assert picks[sgl.greedy_token_selection] == "x"
    assert picks[sgl.unconditional_likelihood_normalized] == "x"


def test_ties_go_to_the_earliest_choice():
    d = decide(sgl.token_length_normalized, ["a", "b"], [entries(-1.0), entries(-1.0)])
    assert d.decision == "a"
