"""Schema-driven fuzzing: schemathesis reads a real server's OpenAPI document and sends every
operation bodies and parameters generated from it, valid and invalid; none may get a 5xx or
hang (every call has a client timeout). The published schemas are the real ones (`/generate`'s
and `/abort_request`'s included), so generated bodies reach generation, not only validation.

Generation stays cheap whatever is drawn: before a call, any output length or sample count in
the body is capped at 2 (as in test_fuzz.py) and any list at 4 items. The default run sends a bounded number of cases
per operation; `$SGLANG_SCHEMA_FUZZ_EXAMPLES` or the slow variant send more.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error

from sglang.ci.servers import RunningServer

EXAMPLES = int(os.environ.get("SGLANG_SCHEMA_FUZZ_EXAMPLES") or 5)
"""Per operation in the default run."""
SLOW_EXAMPLES = 60
CALL_TIMEOUT_S = 120
CAPPED = {
    "max_new_tokens": 2,
    "max_tokens": 2,
    "max_completion_tokens": 2,
    "max_output_tokens": 2,
    "n": 2,
    "min_new_tokens": 0,
}
MAX_ITEMS = 4
OLLAMA_GENERATION = ("/api/generate", "/api/chat")
OPENAI_GENERATION = ("/v1/completions", "/v1/chat/completions", "/invocations")
"""OpenAI-shaped bodies whose output length is `max_tokens` (SageMaker's /invocations is the chat route)."""
OUTPUT_CAPS = ("max_tokens", "max_completion_tokens")
"""An OpenAI body with either set (and capped) has a short output; one with neither gets one."""
STATUSES: Counter[tuple[str, int]] = Counter()
NOT_FUZZED = (
    "/start_profile",
    "/stop_profile",
    "/pause_generation",
    "/continue_generation",
    "/update_weight_version",
    "/update_weights_from_disk",
    "/configure_logging",
)
"""Routes that change the shared server for every later case: a started profile records it until
stopped (and writes its trace outside the test's folders), a pause holds every request until
continued, a new weight version labels every later output, a path that loads replaces the
weights, a debug log level floods the log. tests/e2e/test_upstream_fields.py,
test_weight_routes.py and test_configure_logging.py check them."""


def _capped(value: Any) -> Any:
    """`value` with every output length and sample count above the cap lowered to it, and every
    list cut to `MAX_ITEMS` (a chat of many tool calls in escaped Unicode is thousands of prompt
    tokens: a minute of prefill on the shared server's one thread)."""
    if isinstance(value, list):
        return [_capped(v) for v in value[:MAX_ITEMS]]
    if not isinstance(value, dict):
        return value
    out = {}
    for key, item in value.items():
        cap = CAPPED.get(key)
        # An integral float (6000.0) counts too: the lenient int fields of the OpenAI models take it.
        big = cap is not None and isinstance(item, (int, float)) and not isinstance(item, bool) and item > cap
        out[key] = cap if big else _capped(item)
    return out


def _cheap(path: str, body: Any) -> Any:
    """`body` capped, with the cap also set where the body leaves the length to its default
    (128 tokens for /generate, the context's room for a chat)."""
    body = _capped(body)
    if not isinstance(body, dict):
        return body
    if path == "/generate":
        params = body.get("sampling_params")
        if params is None:
            body["sampling_params"] = {"max_new_tokens": 2}
        for one in params if isinstance(params, list) else [params]:
            if isinstance(one, dict) and one.get("max_new_tokens") is None:
                one["max_new_tokens"] = 2
    elif path in OPENAI_GENERATION and all(body.get(k) is None for k in OUTPUT_CAPS):
        body["max_tokens"] = 2
    elif path == "/v1/responses" and body.get("max_output_tokens") is None:
        body["max_output_tokens"] = 2
    elif path in OLLAMA_GENERATION:
        # Ollama's default (and any negative num_predict) is no limit: up to the context.
        options = body.setdefault("options", {})
        if isinstance(options, dict) and not isinstance(options.get("num_predict", 2), (str, bool, float)):
            predict = options.get("num_predict")
            options["num_predict"] = 2 if predict is None or not 0 <= predict <= 2 else predict
    return body


GENERATION = ("POST /generate", "POST /v1/completions", "POST /v1/chat/completions", "POST /v1/responses")
GENERATION_FACTOR = 3
"""The generation routes get this many times the examples (each costs 2 tokens): most generated
bodies break some rule a schema cannot state (ids within the vocabulary, say)."""
PUBLISHED_EXAMPLES: Counter[tuple[str, int]] = Counter()
"""Statuses of the documents' own example bodies, apart from the generated ones."""


def _call_and_check(case: Any, server: RunningServer, statuses: Counter[tuple[str, int]] = STATUSES) -> None:
    if isinstance(case.body, (dict, list)):
        case.body = _cheap(case.operation.path, case.body)
    response = case.call(base_url=server.url, timeout=CALL_TIMEOUT_S)
    statuses[(case.operation.label, response.status_code)] += 1
    case.validate_response(response, checks=[not_a_server_error])


# Derandomized: the same cases every run, so the default run's few examples per operation reach
# generation (checked below) every time rather than by luck.
# No shrinking: a failing case is reported as drawn (shrinking a timeout costs a timeout a try).
SETTINGS = settings(
    deadline=None,
    database=None,
    derandomize=True,
    phases=(Phase.explicit, Phase.generate),
    suppress_health_check=list(HealthCheck),
)


def _fuzz(server: RunningServer, examples: int) -> None:
    """Every operation of the server's document: its published example bodies, then valid
    cases and (where it takes a body) invalid ones, `examples` of each."""
    schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json")
    for result in schema.get_all_operations():
        operation = result.ok()
        if operation.path in NOT_FUZZED:
            continue
        for strategy in operation.get_strategies_from_examples():

            @settings(SETTINGS, max_examples=1)
            @given(case=strategy)
            def run_example(case: Any) -> None:
                _call_and_check(case, server, PUBLISHED_EXAMPLES)

            run_example()
        modes = list(GenerationMode) if operation.body else [GenerationMode.POSITIVE]
        count = examples * (GENERATION_FACTOR if operation.label in GENERATION else 1)
        for mode in modes:

            @settings(SETTINGS, max_examples=count)
            @given(case=operation.as_strategy(generation_mode=mode))
            def run(case: Any) -> None:
                _call_and_check(case, server)

            run()


def test_no_server_error(server: RunningServer) -> None:
    _fuzz(server, EXAMPLES)


@pytest.mark.slow
def test_no_server_error_long_run(server: RunningServer) -> None:
    _fuzz(server, SLOW_EXAMPLES)


def test_the_document_publishes_the_real_request_schemas(http: httpx.Client) -> None:
    document = http.get("/openapi.json").json()

    def body(path: str) -> dict[str, Any]:
        schema = document["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
        if "$ref" in schema:
            schema = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
        return schema

    generate = body("/generate")
    assert generate["additionalProperties"] is False
    sampling = generate["properties"]["sampling_params"]["anyOf"][0]
    assert sampling["additionalProperties"] is False and sampling["properties"]["top_p"]["maximum"] == 1
    assert body("/abort_request")["required"] == ["rid"]
    for path in ("/v1/completions", "/v1/chat/completions", "/v1/tokenize", "/v1/detokenize"):
        schema = body(path)
        assert schema["additionalProperties"] is False, path
        # No field is published as "anything": each has the type its validation checks.
        untyped = [name for name, field in schema["properties"].items() if not set(field) - {"title", "default"}]
        assert not untyped, (path, untyped)
    chat = body("/v1/chat/completions")["properties"]
    assert chat["temperature"]["minimum"] == 0 and chat["n"]["minimum"] == 1
    assert chat["stop_regex"]["anyOf"][1]["maxItems"] == 32


def test_the_fuzzing_reached_generation_and_the_server_is_healthy(http: httpx.Client) -> None:
    print(sorted(STATUSES.items()))
    for label in GENERATION:
        assert PUBLISHED_EXAMPLES[(label, 200)] == 1, f"{label}'s example: {sorted(PUBLISHED_EXAMPLES.items())}"
        assert STATUSES[(label, 200)] >= 1, f"no generated {label} body was served: {sorted(STATUSES.items())}"
    assert http.get("/health").status_code == 200
    out = http.post("/generate", json={"text": "Hi", "sampling_params": {"max_new_tokens": 1}})
    assert out.status_code == 200 and out.json()["meta_info"]["completion_tokens"] == 1
