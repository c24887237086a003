"""Speculative decoding (NGRAM) under xgrammar constraints and logit bias, on the embedded model.

A draft is cut at its first token the grammar rejects, each verify row is masked with the
grammar's state after the drafts before it, and the matcher is rolled back to where it was, so
greedy outputs are the tokens decoding without speculation gives, with drafts accepted."""

from __future__ import annotations

import json
import re

import torch

from sglang.runtime.scheduler.grammar import GrammarMatcher

from .runtime_harness import Runtime, chat_prompt, make_request, token_ids_of
from .test_structured_output import CODE, PERSON

NGRAM = {"speculative_algorithm": "NGRAM"}
RECORD = '{"name": "Ada", "age": 36, "city": "Paris"}'
CODES = f"{CODE}(, {CODE}){{2}}"


def matcher(rt: Runtime, kind: str, source: str) -> GrammarMatcher:
    backend = rt.scheduler.grammar
    return GrammarMatcher(backend._compile(kind, source), backend.vocab_size)


def test_walk_draft_cuts_at_the_first_rejected_token_and_rolls_back(rt: Runtime) -> None:
    grammar = matcher(rt, "regex", CODE)
    start = grammar.next_token_bitmask()
    good = token_ids_of(rt.tokenizer, "red-1")
    bad = token_ids_of(rt.tokenizer, "x")
    draft, bitmasks = grammar.walk_draft([*good, *bad, *good])
    assert draft == good
    assert bitmasks.shape == (len(good) + 1, start.shape[0])
    assert torch.equal(bitmasks[0], start) and not torch.equal(bitmasks[1], start)
    assert torch.equal(grammar.next_token_bitmask(), start), "the walk moved the matcher"
    for token in good:  # the rows are the states the matcher goes through when the tokens are kept
        grammar.accept(token)
    assert torch.equal(grammar.next_token_bitmask(), bitmasks[-1])


def test_walk_draft_stops_before_the_grammar_ends(rt: Runtime) -> None:
    grammar = matcher(rt, "ebnf", 'root ::= "yes" | "no"')
    end = min(rt.scheduler.eos_token_ids)
    yes = token_ids_of(rt.tokenizer, "yes")
    draft, bitmasks = grammar.walk_draft([*yes, end, *yes])
    assert draft == yes and bitmasks.shape[0] == len(yes) + 1
    assert not grammar.is_terminated()


def test_constrained_and_biased_greedy_outputs_are_the_same_with_ngram(rt: Runtime) -> None:
    def requests() -> list:
        ask = f"Repeat this record exactly, as JSON: {RECORD}"
        return [
            make_request(chat_prompt(rt.tokenizer, ask), rid="json", json_schema=json.dumps(PERSON), max_new_tokens=40),
            make_request(
                chat_prompt(rt.tokenizer, "Repeat these codes: red-123, red-123, red-123."),
                rid="regex",
                regex=CODES,
                max_new_tokens=24,
            ),
            make_request(
                chat_prompt(rt.tokenizer, f"Repeat this record exactly: {RECORD}"),
                rid="bias",
                logit_bias={str(token_ids_of(rt.tokenizer, "Ada")[0]): -100.0},
                max_new_tokens=24,
            ),
        ]

    plain = rt.run(requests())
    spec = rt.make_scheduler(**NGRAM)
    ours = rt.run_on(spec, requests())
    for rid, outcome in plain.items():
        assert ours[rid].output_ids == outcome.output_ids, (rid, ours[rid].text, outcome.text)
    assert json.loads(ours["json"].text)["name"] == "Ada"
    assert re.fullmatch(CODES, ours["regex"].text) and ours["regex"].finished_by == "stop", ours["regex"].text
    assert "Ada" not in ours["bias"].text
    for rid in ("json", "regex"):
        assert ours[rid].meta["spec_accept_length"] > 1, (rid, ours[rid].meta)
    assert not spec.has_work and spec.cache.protected_size() == 0
