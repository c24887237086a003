"""`stop_regex`: how far back a pattern can reach, so that the per-token check and the
detokenizer's hold-back look at a bounded tail of the output instead of all of it.

The bound comes from the pattern's parse tree (Python's own regex parser): a literal, a class or
`.` is one character, a repeat multiplies, a branch takes its longest arm. A pattern with an
unbounded repeat (`+`, `*`, `{n,}`) has no bound: None, and callers look at the whole output.
"""

from __future__ import annotations

import functools
import re
from typing import Any

try:
    from re import _parser as sre_parse  # Python 3.11+
except ImportError:  # pragma: no cover - older interpreters
    import sre_parse  # type: ignore[no-redef]

_ONE_CHAR = {sre_parse.LITERAL, sre_parse.NOT_LITERAL, sre_parse.IN, sre_parse.ANY}
_ZERO_WIDTH = {sre_parse.AT, sre_parse.ASSERT, sre_parse.ASSERT_NOT}
_REPEATS = {sre_parse.MAX_REPEAT, sre_parse.MIN_REPEAT}
if hasattr(sre_parse, "POSSESSIVE_REPEAT"):
    _REPEATS.add(sre_parse.POSSESSIVE_REPEAT)


class _Unbounded(Exception):
    pass


def _length(parsed: Any) -> int:
    total = 0
    for op, value in parsed:
        if op in _ONE_CHAR:
            total += 1
        elif op in _ZERO_WIDTH:
            continue
        elif op == sre_parse.SUBPATTERN:
            total += _length(value[-1])
        elif op == sre_parse.BRANCH:
            total += max(_length(arm) for arm in value[1])
        elif op in _REPEATS:
            _low, high, inner = value
            if high == sre_parse.MAXREPEAT:
                raise _Unbounded
            total += high * _length(inner)
        elif op == getattr(sre_parse, "ATOMIC_GROUP", None):
            total += _length(value)
        else:  # back references, conditionals: no cheap bound
            raise _Unbounded
    return total


@functools.lru_cache(maxsize=1024)
def max_match_chars(pattern: str) -> int | None:
    """The most characters a match of `pattern` can span, or None when it has no bound."""
    try:
        return _length(sre_parse.parse(pattern))
    except _Unbounded:
        return None


def longest_reach(patterns: tuple[str, ...]) -> int | None:
    """The largest `max_match_chars` of `patterns` (0 for none); None if one is unbounded."""
    reaches = [max_match_chars(p) for p in patterns]
    return None if None in reaches else max(reaches, default=0)


def first_match(patterns: tuple[str, ...], text: str) -> tuple[str, re.Match[str]] | None:
    """The first pattern (in the order given) that matches in `text`, and its leftmost match."""
    for pattern in patterns:
        match = re.search(pattern, text)
        if match is not None:
            return pattern, match
    return None
