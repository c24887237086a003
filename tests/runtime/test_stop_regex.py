"""stop_regex: the reach of a pattern, the detokenizer's hold-back and cut."""

from __future__ import annotations

import pytest

from sglang.runtime.processes.detokenizer import held_back, trimmed
from sglang.runtime.processes.messages import DecodeSpec
from sglang.runtime.requests.finish_reason import FinishReason
from sglang.runtime.requests.stop_regex import first_match, longest_reach, max_match_chars


@pytest.mark.parametrize(
    ("pattern", "reach"),
    [
        ("abc", 3),
        (r"\d{2,3}x", 4),
        ("a|bcd", 3),
        ("(?=x)ab", 2),
        (r"[a-z]?\.", 2),
        ("(ab){3}", 6),
        (r"\d+", None),
        (r"(a)\1", None),
        ("^end$", 3),
    ],
)
def test_max_match_chars(pattern: str, reach: int | None) -> None:
    assert max_match_chars(pattern) == reach


def test_longest_reach() -> None:
    assert longest_reach(()) == 0
    assert longest_reach(("ab", "abcd")) == 4
    assert longest_reach(("ab", "a+")) is None


def test_first_match_in_the_order_given() -> None:
    pattern, match = first_match(("z", r"\d", "b"), "ab1")
    assert pattern == r"\d" and match.start() == 2
    assert first_match(("z",), "ab") is None


def _spec(regexes: tuple[str, ...], trim: bool = True, stops: tuple[str, ...] = ()) -> DecodeSpec:
    return DecodeSpec(True, True, stops, trim, regexes)


def test_held_back_keeps_a_possible_match_start() -> None:
    assert held_back("count 12", (), (r"\d{3}",)) == "count"
    assert held_back("count 12", (), (r"\d+",)) == "count 12"  # unbounded: nothing held back
    assert held_back("ab", (), (r"\d{5}",)) == ""


def test_trimmed_cuts_where_the_pattern_matched() -> None:
    reason = FinishReason.stop(r"1[56]")
    assert trimmed("13, 14, 15", reason, _spec((r"1[56]",))) == "13, 14, "
    assert trimmed("13, 14, 15", reason, _spec((r"1[56]",), trim=False)) == "13, 14, 15"
    # A stop string with the same text is cut as a string.
    assert trimmed("a.b", FinishReason.stop("."), _spec((".",), stops=(".",))) == "a"
