"""How `select` turns scored choices into a decision: three pure methods over token logprobs.

Inputs, for each choice i (same order as `choices`):
- `input_token_logprobs[i]`: the choice's tokens as `(logprob, token_id, token_text)` entries, the
  logprob of each token given the prompt and the choice's earlier tokens. A logprob may be None
  (a sequence's first token has none); None counts as 0 where a number is needed.
- `normalized_prompt_logprobs[i]`: the mean of those logprobs (token-length normalization).
- `unconditional_token_logprobs[i]`: the same tokens scored without the prompt (only for the
  method that asks for them via `requires_unconditional_logprobs`).
Every method is deterministic and ties go to the earliest choice.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

TokenLogprob = Sequence[Any]  # (logprob | None, token_id | None, token_text | None)


@dataclass
class ChoicesDecision:
    decision: str
    meta_info: dict[str, Any] = field(default_factory=dict)


def _lp(entry: TokenLogprob) -> float:
    return float(entry[0]) if entry[0] is not None else 0.0


def normalized_logprob(token_logprobs: Sequence[TokenLogprob]) -> float:
    """Mean logprob over the tokens that have one; an empty choice scores 0 (log of probability 1)."""
    values = [float(e[0]) for e in token_logprobs if e[0] is not None]
    return sum(values) / len(values) if values else 0.0


def _argmax(values: Sequence[float]) -> int:
    return max(range(len(values)), key=lambda i: (values[i], -i))


class ChoicesSamplingMethod(ABC):
    @property
    def requires_unconditional_logprobs(self) -> bool:
        return False

    @abstractmethod
    def __call__(
        self,
        *,
        choices: list[str],
        normalized_prompt_logprobs: list[float],
        input_token_logprobs: list[list[TokenLogprob]],
        output_token_logprobs: list[list[TokenLogprob]],
        unconditional_token_logprobs: list[list[TokenLogprob]] | None = None,
    ) -> ChoicesDecision: ...

    def __repr__(self) -> str:
        return type(self).__name__


class TokenLengthNormalized(ChoicesSamplingMethod):
    """The choice with the highest mean token logprob."""

    def __call__(self, *, choices, normalized_prompt_logprobs, input_token_logprobs, output_token_logprobs, **_):
        best = _argmax(normalized_prompt_logprobs)
        return ChoicesDecision(
            choices[best],
            {
                "normalized_prompt_logprobs": normalized_prompt_logprobs,
                "input_token_logprobs": input_token_logprobs,
                "output_token_logprobs": output_token_logprobs,
            },
        )


class GreedyTokenSelection(ChoicesSamplingMethod):
    """Walk token positions left to right, keeping only the choices with the best logprob there.

    A choice shorter than the position compares with its own mean logprob, so a choice that is a
    prefix of a longer one is not favoured for simply ending early.
    """

    def __call__(self, *, choices, normalized_prompt_logprobs, input_token_logprobs, output_token_logprobs, **_):
        width = max((len(t) for t in input_token_logprobs), default=0)
        matrix = []
        for tokens in input_token_logprobs:
            row = [_lp(e) for e in tokens]
            pad = sum(row) / len(row) if row else 0.0
            matrix.append(row + [pad] * (width - len(row)))
        remaining = list(range(len(choices)))
        for j in range(width):
            best = max(matrix[i][j] for i in remaining)
            remaining = [i for i in remaining if matrix[i][j] == best]
            if len(remaining) == 1:
                break
        return ChoicesDecision(
            choices[remaining[0]],
            {
                "normalized_prompt_logprobs": normalized_prompt_logprobs,
                "input_token_logprobs": input_token_logprobs,
                "output_token_logprobs": output_token_logprobs,
                "greedy_logprob_matrix": matrix,
            },
        )


class UnconditionalLikelihoodNormalized(ChoicesSamplingMethod):
    """The choice whose tokens gain the most, on average, from the prompt: mean(cond - uncond).

    With equal token counts this is the per-token difference; when an API tokenizes the choice
    differently without the prompt, it is the difference of the two means.
    """

    @property
    def requires_unconditional_logprobs(self) -> bool:
        return True

    def __call__(
        self,
        *,
        choices,
        normalized_prompt_logprobs,
        input_token_logprobs,
        output_token_logprobs,
        unconditional_token_logprobs=None,
    ):
        if unconditional_token_logprobs is None:
            raise ValueError("unconditional_likelihood_normalized needs the unconditional token logprobs")
        scores = []
        for cond, uncond in zip(input_token_logprobs, unconditional_token_logprobs, strict=True):
            cond_mean = sum(_lp(e) for e in cond) / len(cond) if cond else 0.0
            uncond_mean = sum(_lp(e) for e in uncond) / len(uncond) if uncond else 0.0
            scores.append(cond_mean - uncond_mean)
        return ChoicesDecision(
            choices[_argmax(scores)],
            {
                "normalized_prompt_logprobs": normalized_prompt_logprobs,
                "input_token_logprobs": input_token_logprobs,
                "output_token_logprobs": output_token_logprobs,
                "unconditional_token_logprobs": unconditional_token_logprobs,
                "normalized_unconditional_prompt_logprobs": scores,
            },
        )


token_length_normalized = TokenLengthNormalized()
greedy_token_selection = GreedyTokenSelection()
unconditional_likelihood_normalized = UnconditionalLikelihoodNormalized()
