"""NGRAM drafting: the tokens that followed the latest earlier occurrence of a sequence's suffix.

`NgramIndex` is a suffix index over a token sequence: for each token, the positions where it
occurs. To draft for a context, it takes the positions of the context's last token (newest
first, at most `MAX_CANDIDATES`), measures how many tokens before each one match the context's
tail (up to the match window), and proposes what followed the longest match. No weights, no
model: a request whose output repeats its prompt (editing, extraction, code) drafts well; one
that does not simply drafts nothing and decodes as usual.

Invariants: a drafted run never crosses a `SEPARATOR` (the boundary between two requests in a
shared corpus); matched window plus drafts never exceed the trie depth (upstream's
`--speculative-ngram-max-trie-depth`: the longest n-gram its trie holds); drafting never changes
the index.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

SEPARATOR = -1
"""Between two requests' tokens in a shared corpus: never a token id, so never matched."""
MAX_CANDIDATES = 64
"""Occurrences of the last token examined per draft, newest first: bounds a draft's cost on a
long, repetitive sequence, where the newest occurrences are also the likeliest to continue."""


@dataclass(frozen=True)
class NgramLimits:
    """`min_window`/`max_window`: shortest/longest context tail matched; `max_depth`: longest
    n-gram (tail plus drafts)."""

    min_window: int
    max_window: int
    max_depth: int


class NgramIndex:
    """Token positions of one sequence (a request's prompt and output, or a shared corpus)."""

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.positions: defaultdict[int, list[int]] = defaultdict(list)

    def __len__(self) -> int:
        return len(self.tokens)

    def extend(self, tokens: Sequence[int]) -> None:
        for token in tokens:
            self.positions[token].append(len(self.tokens))
            self.tokens.append(token)

    def draft(
        self, context: Sequence[int], max_tokens: int, limits: NgramLimits, exclude_tail: bool
    ) -> tuple[list[int], int]:
        """Up to `max_tokens` tokens that followed the longest match of `context`'s tail (ties: the
        one followed by more tokens, then the newest), and that match's length; ([], 0) when no
        tail of `min_window` tokens occurs. `exclude_tail`: `context` is this index's own
        sequence, whose final position matches itself trivially and is skipped."""
        if not context or max_tokens < 1:
            return [], 0
        window = min(limits.max_window, limits.max_depth - 1, len(context))
        if window < limits.min_window:
            return [], 0
        occurrences = self.positions.get(context[-1], [])
        stop = len(occurrences)
        if exclude_tail and stop and occurrences[-1] == len(self.tokens) - 1:
            stop -= 1
        best, best_pos = (0, 0), -1
        for pos in reversed(occurrences[max(0, stop - MAX_CANDIDATES) : stop]):
            # Longest match first; among equal ones, the one with more tokens after it (in a
            # loop, the newest occurrence is followed by the fewest).
            score = (self._match_length(context, pos, window), min(len(self.tokens) - 1 - pos, max_tokens))
            if score > best:
                best, best_pos = score, pos
                if score == (window, max_tokens):
                    break
        best_len = best[0]
        if best_len < limits.min_window:
            return [], 0
        count = min(max_tokens, limits.max_depth - best_len)
        drafted = self.tokens[best_pos + 1 : best_pos + 1 + count]
        if SEPARATOR in drafted:
            drafted = drafted[: drafted.index(SEPARATOR)]
        return drafted, best_len

    def _match_length(self, context: Sequence[int], pos: int, window: int) -> int:
        """How many tokens ending at `pos` equal the tail of `context` (at most `window`)."""
        length = 0
        while length < window and pos - length >= 0 and self.tokens[pos - length] == context[-1 - length]:
            length += 1
        return length


class NgramCorpus:
    """Finished requests' tokens, newest kept, at most `capacity` tokens (upstream's
    `--speculative-ngram-capacity`), for requests whose own tokens offer no match."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.index = NgramIndex()

    def add(self, tokens: Sequence[int]) -> None:
        if self.capacity <= 0 or not tokens:
            return
        tokens = list(tokens[-self.capacity :])
        if len(self.index) + len(tokens) + 1 > self.capacity:
            # Rebuilt from the newest half: amortized O(1) a token, and the bound holds at all times.
            kept = self.index.tokens[len(self.index.tokens) // 2 :]
            kept = kept[kept.index(SEPARATOR) + 1 :] if SEPARATOR in kept else []
            kept = kept[max(0, len(kept) + len(tokens) + 1 - self.capacity) :]
            self.index = NgramIndex()
            self.index.extend(kept)
        self.index.extend([*tokens, SEPARATOR])

    def reset(self) -> None:
        self.index = NgramIndex()
