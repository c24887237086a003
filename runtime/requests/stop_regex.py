"""`stop_regex`: client patterns run on RE2, a linear-time engine, under a CPU-time budget, so
that no pattern can stall the scheduler that checks them after every token.

Python's backtracking `re` takes exponential time on patterns such as `(.|.)*QQQQ`; RE2 never
backtracks, so one search costs at most (text length) x (pattern size). Patterns RE2 cannot run
(lookarounds, back references) are refused at validation with RE2's reason. Differences from
Python's syntax that remain: `\\d`, `\\w`, `\\s` and `\\b` are ASCII-only (`\\pN`, `\\pL` name
the Unicode classes) and `$` matches only at the very end unless `(?m)`.

Linear is not free: the scheduler searches the whole output of an unbounded pattern at every
token, and a pattern whose automaton does not fit RE2's cache runs at about a microsecond per
character. `first_match` therefore stops once a check has used `SEARCH_BUDGET_S` of CPU time
and raises `StopRegexTooSlow`; the request is then aborted with a 400 naming the pattern.

The reach of a pattern comes from its parse tree (Python's own regex parser): a literal, a
class or `.` is one character, a repeat multiplies, a branch takes its longest arm. A pattern
with an unbounded repeat (`+`, `*`, `{n,}`) has no bound: None, and callers look at the whole
output.
"""

from __future__ import annotations

import functools
import re
import time
from typing import Any

import re2

try:
    from re import _parser as sre_parse  # Python 3.11+
except ImportError:  # pragma: no cover - older interpreters
    import sre_parse  # type: ignore[no-redef]

SEARCH_BUDGET_S = 0.01
"""CPU seconds one check of a request's patterns may take (thread time, so a busy machine does
not count against it). An honest unbounded pattern over a 40,000-character output takes about
0.3 ms here; a cache-thrashing one passes the budget near 8,000 characters."""

_ONE_CHAR = {sre_parse.LITERAL, sre_parse.NOT_LITERAL, sre_parse.IN, sre_parse.ANY}
_ZERO_WIDTH = {sre_parse.AT, sre_parse.ASSERT, sre_parse.ASSERT_NOT}
_REPEATS = {sre_parse.MAX_REPEAT, sre_parse.MIN_REPEAT}
if hasattr(sre_parse, "POSSESSIVE_REPEAT"):
    _REPEATS.add(sre_parse.POSSESSIVE_REPEAT)


class StopRegexTooSlow(Exception):
    """A check passed `SEARCH_BUDGET_S`; `pattern` is the one running when it did."""

    def __init__(self, pattern: str, seconds: float) -> None:
        super().__init__(
            f"stop_regex {pattern!r} took {seconds * 1000:.0f} ms of CPU time in one check "
            f"(budget {SEARCH_BUDGET_S * 1000:.0f} ms): use a simpler or bounded pattern"
        )
        self.pattern = pattern


class _Unbounded(Exception):
    pass


def _options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # a refused pattern is the client's error, not a log line of ours
    options.never_capture = True  # only where a match starts is used; captures cost time
    return options


_OPTIONS = _options()


@functools.lru_cache(maxsize=1024)
def compiled(pattern: str) -> Any:
    """`pattern` compiled by RE2 (cached). Raises ValueError with RE2's reason if it cannot run it."""
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error as e:
        reason = e.args[0].decode(errors="replace") if e.args and isinstance(e.args[0], bytes) else str(e)
        raise ValueError(f"invalid pattern {pattern!r} (RE2 syntax, linear time): {reason}") from None


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
    """The most characters a match of `pattern` can span, or None when it has no bound (or
    Python's parser does not read a pattern RE2 accepts, such as `\\pL`)."""
    try:
        return _length(sre_parse.parse(pattern))
    except (_Unbounded, re.error):
        return None


def longest_reach(patterns: tuple[str, ...]) -> int | None:
    """The largest `max_match_chars` of `patterns` (0 for none); None if one is unbounded."""
    reaches = [max_match_chars(p) for p in patterns]
    return None if None in reaches else max(reaches, default=0)


def first_match(patterns: tuple[str, ...], text: str, budget_s: float | None = None) -> tuple[str, int] | None:
    """The first pattern (in the order given) that matches in `text`, and where its leftmost
    match starts. With `budget_s`, raises `StopRegexTooSlow` once the searches have used more
    CPU time than that (each search is linear, so it returns before the check is made)."""
    started = time.thread_time()
    for pattern in patterns:
        match = compiled(pattern).search(text)
        if match is not None:
            return pattern, match.start()
        used = time.thread_time() - started
        if budget_s is not None and used > budget_s:
            raise StopRegexTooSlow(pattern, used)
    return None
