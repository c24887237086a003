"""Property-based fuzzing of /generate, /v1/completions and /v1/chat/completions: hypothesis
builds request bodies from each endpoint's real fields, filled with valid values and junk (wrong
types, huge or negative numbers, unknown keys), and the server must answer every one with a
success or a 4xx carrying an OpenAI error object: never a 500, never a hang.

Generation stays cheap whatever hypothesis draws: every body caps its output at 0-2 tokens (the
cap is either a small valid value or junk that is refused), and counts that multiply work (`n`)
are small or far beyond what the server accepts.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglang.ci.servers import sse_events

EXAMPLES = int(os.environ.get("SGLANG_FUZZ_EXAMPLES") or 60)
"""Per endpoint; three endpoints make 180 requests in all (more with `$SGLANG_FUZZ_EXAMPLES`)."""
FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
HUGE = st.sampled_from([2**31, 2**63, -(2**63), 2**64, 10**30, -(10**30)])

junk = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    HUGE,
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.text(max_size=6),
    st.lists(st.integers(-2, 5), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(-1, 1), max_size=2),
)
"""Values of every JSON type, valid or not for any given field."""
small_text = st.text(min_size=0, max_size=12)
some_text = st.text(min_size=1, max_size=12)
token_ids = st.lists(st.one_of(st.integers(0, 49151), st.integers(-5, -1), HUGE), min_size=0, max_size=6)
valid_ids = st.lists(st.integers(0, 49151), min_size=1, max_size=6)
max_tokens = st.one_of(st.integers(0, 2), st.integers(-(10**6), -1), st.text(max_size=3), st.lists(st.integers()))
"""Small enough to be cheap when valid; every other value is refused."""
sample_count = st.one_of(st.integers(-2, 3), st.sampled_from([10**6, 2**63]), st.text(max_size=2))
grammar = st.one_of(
    st.sampled_from(["[a-z]", "(", "a|", '{"type": "object"}', '{"type": "nonsense"}', "{", 'root ::= "a"']),
    small_text,
)


def maybe(fields: dict[str, st.SearchStrategy], junk_too: bool) -> st.SearchStrategy[dict[str, Any]]:
    """A dict with any subset of `fields`, each value drawn from its strategy, or (with
    `junk_too`, one time in three) junk."""
    if junk_too:
        fields = {k: st.one_of(v, v, junk) for k, v in fields.items()}
    return st.fixed_dictionaries({}, optional=fields)


def merged(*parts: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """One dict from several dict strategies (later parts win on shared keys)."""
    return st.tuples(*parts).map(lambda dicts: {k: v for d in dicts for k, v in d.items()})


def valid_or_chaos(
    valid: st.SearchStrategy[dict[str, Any]], chaos: st.SearchStrategy[dict[str, Any]]
) -> st.SearchStrategy[dict[str, Any]]:
    """Bodies in range (they reach generation and its output paths) or anything at all (with an
    unknown key now and then): the validation paths."""
    extra = st.dictionaries(st.sampled_from(["foo", "max_new_tokens_", "temprature", ""]), junk, max_size=1)
    return st.one_of(valid, merged(extra, chaos))


# Sampling fields: `VALID_*` stay in range, the others stray out of it.
VALID_SAMPLING = {
    "temperature": st.floats(0, 2),
    "top_p": st.floats(0.05, 1),
    "top_k": st.one_of(st.just(-1), st.integers(1, 50)),
    "min_p": st.floats(0, 1),
    "frequency_penalty": st.floats(-2, 2),
    "presence_penalty": st.floats(-2, 2),
    "repetition_penalty": st.floats(0.1, 2),
    "seed": st.integers(0, 2**40),
    "stop": st.one_of(some_text, st.lists(some_text, max_size=3)),
    "stop_token_ids": st.lists(st.integers(0, 49151), max_size=3),
    "logit_bias": st.dictionaries(st.integers(0, 49151).map(str), st.floats(-100, 100), max_size=3),
    "ignore_eos": st.booleans(),
    "skip_special_tokens": st.booleans(),
}
SAMPLING = {
    **VALID_SAMPLING,
    "temperature": st.floats(-1, 3),
    "top_p": st.floats(-0.5, 1.5),
    "top_k": st.integers(-2, 50),
    "min_p": st.floats(-0.5, 1.5),
    "frequency_penalty": st.floats(-3, 3),
    "presence_penalty": st.floats(-3, 3),
    "repetition_penalty": st.floats(-1, 3),
    # Past 64 bits a seed once killed the engine (its generator's seeding raised in the scheduler).
    "seed": st.one_of(st.integers(-5, 2**40), HUGE),
    "stop": st.one_of(small_text, st.lists(small_text, max_size=3)),
    "stop_token_ids": token_ids,
    "logit_bias": st.dictionaries(
        st.one_of(st.integers(-5, 60000).map(str), small_text), st.floats(-200, 200), max_size=3
    ),
}

# -- /generate ---------------------------------------------------------------------------------
VALID_NATIVE_EXTRAS = {
    "stream": st.booleans(),
    "return_logprob": st.booleans(),
    "logprob_start_len": st.just(-1),
    "top_logprobs_num": st.integers(0, 5),
    "token_ids_logprob": st.lists(st.integers(0, 49151), max_size=3),
    "return_text_in_logprobs": st.booleans(),
}
NATIVE_EXTRAS = {
    **VALID_NATIVE_EXTRAS,
    "logprob_start_len": st.integers(-2, 4),
    "top_logprobs_num": st.integers(-1, 5),
    "token_ids_logprob": token_ids,
    "rid": small_text,
    "priority": st.integers(-3, 3),
}
NATIVE_SAMPLING_EXTRAS = {
    **SAMPLING,
    "n": sample_count,
    "min_new_tokens": st.integers(-1, 3),
    "json_schema": grammar,
    "regex": grammar,
    "ebnf": grammar,
    "no_stop_trim": st.booleans(),
}
VALID_NATIVE_SAMPLING = {**VALID_SAMPLING, "n": st.integers(1, 3), "regex": st.sampled_from(["[a-z ]+", "[0-9]"])}
valid_generate = merged(
    st.one_of(
        st.fixed_dictionaries({"text": st.one_of(some_text, st.lists(some_text, min_size=1, max_size=3))}),
        st.fixed_dictionaries({"input_ids": st.one_of(valid_ids, st.lists(valid_ids, min_size=1, max_size=2))}),
    ),
    st.fixed_dictionaries(
        {
            "sampling_params": merged(
                maybe(VALID_NATIVE_SAMPLING, False), st.fixed_dictionaries({"max_new_tokens": st.integers(0, 2)})
            )
        }
    ),
    maybe(VALID_NATIVE_EXTRAS, False),
)
chaos_generate = merged(
    st.one_of(
        st.fixed_dictionaries({"text": st.one_of(small_text, st.lists(small_text, max_size=3), junk)}),
        st.fixed_dictionaries({"input_ids": st.one_of(token_ids, st.lists(token_ids, max_size=2), junk)}),
    ),
    st.fixed_dictionaries(
        {
            "sampling_params": st.one_of(
                merged(maybe(NATIVE_SAMPLING_EXTRAS, True), st.fixed_dictionaries({"max_new_tokens": max_tokens})),
                st.lists(st.fixed_dictionaries({"max_new_tokens": st.integers(0, 2)}), max_size=3),
                junk,
            )
        }
    ),
    maybe(NATIVE_EXTRAS, True),
)
generate_bodies = valid_or_chaos(valid_generate, chaos_generate)

# -- /v1/completions ---------------------------------------------------------------------------
VALID_OPENAI_COMMON = {
    **VALID_SAMPLING,
    "model": st.just(""),
    "n": st.integers(1, 3),
    "stream": st.booleans(),
    "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}),
    "user": small_text,
}
OPENAI_COMMON = {
    **SAMPLING,
    **{k: v for k, v in VALID_OPENAI_COMMON.items() if k not in VALID_SAMPLING},
    "model": st.sampled_from(["", "gpt-4", "default"]),
    "n": sample_count,
    "regex": grammar,
}
VALID_COMPLETION_EXTRAS = {**VALID_OPENAI_COMMON, "echo": st.booleans(), "logprobs": st.integers(0, 5)}
COMPLETION_EXTRAS = {
    **OPENAI_COMMON,
    "echo": st.booleans(),
    "logprobs": st.integers(-1, 25),
    "suffix": small_text,
    "json_schema": grammar,
    "best_of": st.integers(-1, 2),
}
valid_completion = merged(
    maybe(VALID_COMPLETION_EXTRAS, False),
    st.fixed_dictionaries(
        {
            "prompt": st.one_of(some_text, st.lists(some_text, min_size=1, max_size=2), valid_ids),
            "max_tokens": st.integers(0, 2),
        }
    ),
)
chaos_completion = merged(
    maybe(COMPLETION_EXTRAS, True),
    st.fixed_dictionaries(
        {"prompt": st.one_of(small_text, st.lists(small_text, max_size=2), token_ids, junk), "max_tokens": max_tokens}
    ),
)
completion_bodies = valid_or_chaos(valid_completion, chaos_completion)

# -- /v1/chat/completions ----------------------------------------------------------------------
text_parts = st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": small_text}), max_size=2)
valid_message = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant", "developer"]), "content": st.one_of(some_text, text_parts)}
)
message = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant", "developer", "tool", "wizard"])},
    optional={"content": st.one_of(small_text, text_parts, junk), "name": small_text, "tool_call_id": small_text},
)
TOOL = {
    "type": "function",
    "function": {"name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}},
}
VALID_RESPONSE_FORMATS = [
    {"type": "text"},
    {"type": "json_object"},
    {"type": "json_schema", "json_schema": {"name": "s", "schema": {"type": "object"}}},
]
RESPONSE_FORMATS = [
    *VALID_RESPONSE_FORMATS,
    {"type": "json_schema", "json_schema": {"name": "s", "schema": {"type": "nonsense"}}},
    {"type": "json_schema"},
    {"type": "yaml"},
]
TOOL_CHOICES = ["none", "auto", "required", {"type": "function", "function": {"name": "f"}}, "always"]
VALID_CHAT_EXTRAS = {
    **VALID_OPENAI_COMMON,
    "logprobs": st.just(True),
    "top_logprobs": st.integers(0, 5),
    "response_format": st.sampled_from(VALID_RESPONSE_FORMATS),
}
CHAT_EXTRAS = {
    **OPENAI_COMMON,
    "max_tokens": max_tokens,
    "logprobs": st.booleans(),
    "top_logprobs": st.integers(-1, 25),
    "response_format": st.sampled_from(RESPONSE_FORMATS),
    "tools": st.lists(st.just(TOOL), max_size=1),
    "tool_choice": st.sampled_from(TOOL_CHOICES),
    "parallel_tool_calls": st.booleans(),
    "continue_final_message": st.booleans(),
}
valid_chat = merged(
    maybe(VALID_CHAT_EXTRAS, False),
    st.one_of(
        st.just({}),
        st.fixed_dictionaries({"tools": st.just([TOOL]), "tool_choice": st.sampled_from(TOOL_CHOICES[:4])}),
    ),
    st.fixed_dictionaries(
        {"messages": st.lists(valid_message, min_size=1, max_size=3), "max_completion_tokens": st.integers(1, 2)}
    ),
)
chaos_chat = merged(
    maybe(CHAT_EXTRAS, True),
    st.fixed_dictionaries(
        {"messages": st.one_of(st.lists(message, max_size=3), junk), "max_completion_tokens": max_tokens}
    ),
)
chat_bodies = valid_or_chaos(valid_chat, chaos_chat)

STATUSES: dict[str, Counter[int]] = {}
"""Status codes seen per endpoint, to show the fuzzing reaches generation, not only validation."""


def check_response(response: httpx.Response, body: Any) -> None:
    """Success, or a client error with an OpenAI error object; never a server error."""
    context = f"body={json.dumps(body)[:800]} -> {response.status_code} {response.text[:800]}"
    assert response.status_code < 500, context
    if response.status_code != 200:
        assert 400 <= response.status_code < 500, context
        error = response.json()["error"]
        assert error["message"] and error["type"] and error["code"] == response.status_code, context
        return
    if response.headers["content-type"].startswith("text/event-stream"):
        events = list(sse_events(response.text.splitlines()))
        assert events and events[-1] == "[DONE]", context
        for event in events[:-1]:
            assert "error" not in event or event["error"]["code"] < 500, context
    else:
        assert response.json() is not None, context


def post_json(http: httpx.Client, path: str, body: Any) -> httpx.Response:
    response = http.post(path, content=json.dumps(body), headers={"content-type": "application/json"}, timeout=60)
    STATUSES.setdefault(path, Counter())[response.status_code] += 1
    return response


@FUZZ_SETTINGS
@given(body=generate_bodies)
def test_fuzz_generate(http: httpx.Client, body: dict[str, Any]) -> None:
    check_response(post_json(http, "/generate", body), body)


@FUZZ_SETTINGS
@given(body=completion_bodies)
def test_fuzz_completions(http: httpx.Client, body: dict[str, Any]) -> None:
    check_response(post_json(http, "/v1/completions", body), body)


@FUZZ_SETTINGS
@given(body=chat_bodies)
def test_fuzz_chat_completions(http: httpx.Client, body: dict[str, Any]) -> None:
    check_response(post_json(http, "/v1/chat/completions", body), body)


def test_server_healthy_after_fuzzing(http: httpx.Client) -> None:
    for path, seen in STATUSES.items():
        print(f"{path}: {dict(seen)}")
        assert seen[200] >= 3, f"{path}: too few fuzzed bodies were valid to reach generation: {dict(seen)}"
    assert http.get("/health").status_code == 200
    out = http.post("/generate", json={"text": "Hi", "sampling_params": {"max_new_tokens": 1}})
    assert out.status_code == 200 and out.json()["meta_info"]["completion_tokens"] == 1
