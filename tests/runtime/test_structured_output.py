"""Structured output on the embedded model: JSON schema, regex and EBNF constrain what it
generates; a grammar that does not compile fails its own request only."""

from __future__ import annotations

import json
import re

import jsonschema

from .runtime_harness import Runtime, chat_prompt, make_request

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "city": {"type": "string", "enum": ["Paris", "Rome", "Oslo"]},
    },
    "required": ["name", "age", "city"],
    "additionalProperties": False,
}
CODE = r"(red|green|blue)-[0-9]{3}"
YES_NO = 'root ::= "yes" | "no"'


def test_outputs_follow_their_grammars_in_one_batch(rt: Runtime) -> None:
    requests = [
        make_request(
            chat_prompt(rt.tokenizer, "Describe a person as JSON."),
            rid="json",
            json_schema=json.dumps(PERSON),
            max_new_tokens=48,
        ),
        make_request(
            chat_prompt(rt.tokenizer, "Describe a person as JSON."),
            rid="json-hot",
            json_schema=json.dumps(PERSON),
            temperature=1.0,
            seed=3,
            max_new_tokens=48,
        ),
        make_request(chat_prompt(rt.tokenizer, "Give me a colour code."), rid="regex", regex=CODE, max_new_tokens=12),
        make_request(chat_prompt(rt.tokenizer, "Is Paris in France?"), rid="ebnf", ebnf=YES_NO, max_new_tokens=4),
        make_request(chat_prompt(rt.tokenizer), rid="free", max_new_tokens=8),
    ]
    out = rt.run(requests)
    for rid in ("json", "json-hot"):
        assert out[rid].finished_by == "stop", out[rid].finish_reason
        jsonschema.validate(json.loads(out[rid].text), PERSON)
    assert out["regex"].finished_by == "stop"
    assert re.fullmatch(CODE, out["regex"].text), out["regex"].text
    assert out["ebnf"].text in ("yes", "no")
    assert out["free"].text == "The capital of France is Paris."


def test_an_invalid_grammar_fails_only_its_own_request(rt: Runtime) -> None:
    prompt = chat_prompt(rt.tokenizer)
    requests = [
        make_request(prompt, rid="bad-regex", regex="(unclosed"),
        make_request(prompt, rid="bad-schema", json_schema=json.dumps({"type": "object", "properties": 5})),
        make_request(prompt, rid="bad-ebnf", ebnf="root ::= missing_rule"),
        make_request(prompt, rid="good-regex", regex=CODE, max_new_tokens=12),
        make_request(prompt, rid="plain", max_new_tokens=8),
    ]
    out = rt.run(requests)
    for rid, kind, words in (
        ("bad-regex", "regex", "parenthesis is not closed"),
        ("bad-schema", "json_schema", "properties must be an object"),
        ("bad-ebnf", "ebnf", "missing_rule"),
    ):
        assert out[rid].finished_by == "abort", out[rid].finish_reason
        message = out[rid].finish_reason["message"]
        assert message.startswith(f"invalid {kind}: ")
        assert words in message
        assert ".cc:" not in message and not message.endswith("\n"), "the compiler's log prefix is stripped"
        assert out[rid].output_ids == []
    assert re.fullmatch(CODE, out["good-regex"].text)
    assert out["plain"].text == "The capital of France is Paris."
