"""stop_regex: RE2 compilation and refusals, the CPU budget, the reach of a pattern, the
detokenizer's hold-back and cut."""

from __future__ import annotations

import random
import time

import pytest

from sglang.runtime.processes.detokenizer import held_back, trimmed
from sglang.runtime.processes.messages import DecodeSpec
from sglang.runtime.requests.finish_reason import FinishReason
from sglang.runtime.requests.stop_regex import (
    StopRegexTooSlow,
    compiled,
    first_match,
    longest_reach,
    max_match_chars,
)
from sglang.runtime.scheduler import req as req_module
from tests.runtime.runtime_harness import make_request


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
        (r"\pL{2}", None),  # RE2 syntax Python's parser does not read: no bound claimed
    ],
)
def test_max_match_chars(pattern: str, reach: int | None) -> None:
    assert max_match_chars(pattern) == reach


def test_longest_reach() -> None:
    assert longest_reach(()) == 0
    assert longest_reach(("ab", "abcd")) == 4
    assert longest_reach(("ab", "a+")) is None


def test_first_match_in_the_order_given() -> None:
    assert first_match(("z", r"\d", "b"), "ab1") == (r"\d", 2)
    assert first_match(("z",), "ab") is None
    # Offsets are in characters, not UTF-8 bytes.
    assert first_match(("x",), "\u00e9\u00e9x") == ("x", 2)


@pytest.mark.parametrize("pattern", ["(?=x)ab", "(?<!a)b", r"(a)\1", "(unclosed", "a{2000}"])
def test_patterns_re2_cannot_run_are_refused(pattern: str) -> None:
    with pytest.raises(ValueError, match="RE2"):
        compiled(pattern)


def test_a_catastrophic_pattern_runs_in_linear_time() -> None:
    # Python's `re` takes exponential time on this text (minutes at 30 characters).
    text = "a" * 20_000 + "QQQ"
    started = time.monotonic()
    assert first_match(("(.|.)*QQQQ", "(a|aa)*b", "(x+x+)+y"), text, budget_s=1.0) is None
    assert time.monotonic() - started < 0.5


def test_a_search_over_its_budget_raises_naming_the_pattern() -> None:
    # The automaton of this pattern does not fit RE2's cache: about a microsecond per character.
    thrashing = "[ab]*a[ab]{20}c"
    text = "".join(random.Random(0).choices("ab", k=100_000))
    with pytest.raises(StopRegexTooSlow) as info:
        first_match(("z", thrashing), text, budget_s=0.001)
    assert info.value.pattern == thrashing and "budget" in str(info.value)
    # A match found is returned even when the budget ran out on the way.
    assert first_match((thrashing, "b"), text + "c", budget_s=0.0) is not None


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


def test_a_request_whose_pattern_overruns_the_budget_is_aborted_with_400(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(req_module, "SEARCH_BUDGET_S", 0.001)
    text = "".join(random.Random(1).choices("ab", k=100_000))
    req = req_module.Req(make_request([1, 2], stop_regex="[ab]*a[ab]{20}c", max_new_tokens=64), frozenset(), 100, 512)
    req.output_ids.append(5)
    req.check_finished(lambda ids: text)
    reason = req.finish_reason.to_json()
    assert reason["type"] == "abort" and reason["status_code"] == 400, reason
    assert "[ab]*a[ab]{20}c" in reason["message"] and "budget" in reason["message"]
