"""Sampling from a batch of logits `[B, V]`: penalties, grammar bitmasks, filtering, draws.

Every row carries its own parameters. A temperature of 0 means greedy. Rows with a seed draw
from their own `torch.Generator`, so the same seed gives the same tokens whatever else shares
the batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class SamplingTensors:
    """Per-row sampling parameters of one batch, as device tensors (`[B]` each)."""

    temperatures: torch.Tensor
    top_ps: torch.Tensor
    top_ks: torch.Tensor
    min_ps: torch.Tensor
    generators: list[torch.Generator | None]

    @property
    def all_greedy(self) -> bool:
        return bool((self.temperatures == 0).all())


def apply_penalties(
    logits: torch.Tensor,
    output_counts: torch.Tensor,
    seen_mask: torch.Tensor,
    frequency_penalties: torch.Tensor,
    presence_penalties: torch.Tensor,
    repetition_penalties: torch.Tensor,
) -> torch.Tensor:
    """Returns penalized logits.

    `output_counts` `[B, V]` counts each token among the generated ones (frequency and presence
    penalties, OpenAI's definition); `seen_mask` `[B, V]` marks tokens of prompt or output
    (repetition penalty, CTRL's definition: positive logits divided, negative multiplied).
    """
    counts = output_counts.to(logits.dtype)
    logits = logits - frequency_penalties[:, None] * counts
    logits = logits - presence_penalties[:, None] * (counts > 0).to(logits.dtype)
    rep = repetition_penalties[:, None].to(logits.dtype)
    penalized = torch.where(logits > 0, logits / rep, logits * rep)
    return torch.where(seen_mask, penalized, logits)


def apply_token_bitmask(logits: torch.Tensor, bitmask: torch.Tensor) -> torch.Tensor:
    """Sets to -inf every logit whose bit is 0 in `bitmask` `[B, ceil(V / 32)]` int32
    (xgrammar's layout: token `t` is bit `t % 32` of word `t // 32`). In place; returns `logits`."""
    vocab = logits.shape[-1]
    bits = torch.arange(32, device=logits.device, dtype=torch.int32)
    allowed = ((bitmask[:, :, None] >> bits) & 1).bool().flatten(1)[:, :vocab]
    return logits.masked_fill_(~allowed, float("-inf"))


def filter_probs(probs: torch.Tensor, top_ks: torch.Tensor, top_ps: torch.Tensor, min_ps: torch.Tensor) -> torch.Tensor:
    """Zeroes probabilities outside top-k, outside the top-p nucleus, or below `min_p * max`.
    The most likely token always survives. Not renormalized (draws do not need it)."""
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    ranks = torch.arange(probs.shape[-1], device=probs.device)[None, :]
    drop = ranks >= top_ks[:, None]
    drop |= (sorted_probs.cumsum(dim=-1) - sorted_probs) > top_ps[:, None]
    drop |= sorted_probs < (min_ps[:, None] * sorted_probs[:, :1])
    drop[:, 0] = False
    return probs.scatter(1, order, sorted_probs.masked_fill(drop, 0.0))


def _exponential_noise(
    shape: torch.Size, generators: list[torch.Generator | None], device: torch.device
) -> torch.Tensor:
    noise = torch.empty(shape, device=device).exponential_()
    for row, gen in enumerate(generators):
        if gen is not None:
            # Drawn where the generator lives (requests seed host generators): a generator cannot
            # fill another device's tensor, and the same seed gives the same tokens on any device.
            noise[row] = torch.empty(shape[1], device=gen.device).exponential_(generator=gen).to(device)
    return noise


def sample(logits: torch.Tensor, params: SamplingTensors) -> torch.Tensor:
    """Draws one token per row `[B]` int64. Uses the Gumbel/exponential race
    (`argmax p / E`, `E ~ Exp(1)`), which samples exactly from `p` with one batched argmax."""
    greedy = logits.argmax(dim=-1)
    if params.all_greedy:
        return greedy
    temps = params.temperatures.clamp(min=1e-6)[:, None]
    probs = (logits.float() / temps).softmax(dim=-1)
    probs = filter_probs(probs, params.top_ks, params.top_ps, params.min_ps)
    noise = _exponential_noise(probs.shape, params.generators, probs.device)
    drawn = (probs / noise).argmax(dim=-1)
    return torch.where(params.temperatures == 0, greedy, drawn)


def argmax(logits: torch.Tensor) -> torch.Tensor:
    """Greedy sampling: the index of each row's largest value, `[B]` int64 for `[B, V]` logits.

    Exactly torch.argmax's semantics, which every implementation must match: on ties the lowest
    index wins, and a NaN counts as larger than any number (a row with a NaN gives its first
    NaN's index)."""
    return logits.argmax(dim=-1)


def log_softmax(logits: torch.Tensor) -> torch.Tensor:
    """Float32 log-probabilities over the last dimension."""
    return logits.float().log_softmax(dim=-1)
